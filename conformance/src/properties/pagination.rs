//! Pagination (contract property 2, docs/conformance.md): for any history and every
//! page size, paging to the end yields every message exactly once, in order, with its
//! parts in part-id order; also with appends between page reads. Large cases page histories of thousands of messages with sizes
//! around and above the cap (`clamp_limit`): 999, 1,000, 1,001, 5,000, `usize::MAX`, the
//! default, and a random size between 101 and 1,000.

use forge_core::id::MAX_EXTERNAL_ID_LEN;
use forge_core::store::{clamp_limit, MAX_PAGE_LIMIT};
use forge_core::{
    Cursor, MessageId, MessageWithParts, PartId, SessionId, Store, SyncEvent, TenantId,
};
use proptest::collection::vec;
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

use crate::harness::{ctx_err, envs, same, CaseRun, Ctx};
use crate::strategies::model::T0;
use crate::strategies::model::{self, MessageKind, PartKind};
use crate::strategies::scaled::{large_page, real_id, Sizes};
use crate::Property;

/// A case: a history, a page size, and how many messages to append after each page read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    /// Parts per message (the history has one message per entry).
    pub parts: Vec<u8>,
    /// Page size for the appending pass (0 means the default; above the max is capped).
    pub page: u16,
    /// Messages appended after the 1st, 2nd, … page read.
    pub appends: Vec<u8>,
    /// Messages (one part each) appended to the history before paging (large cases).
    #[serde(default, skip_serializing_if = "super::is_zero")]
    pub bulk: u16,
    /// Ids of the longest length allowed (256 bytes), message ids equal but for their
    /// last 30 bytes, so every cursor carries a 256-byte id.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub long_ids: bool,
}

/// Above this many messages a case pages with a few sizes instead of every size.
const SWEEP: usize = 100;

/// Any case: up to 60 messages, any page size including 0 and oversized.
pub fn case() -> impl Strategy<Value = Case> {
    let page = prop_oneof![
        10 => 1u16..70,
        1 => Just(0u16),
        1 => Just(5_000u16),
    ];
    (
        vec(0u8..4, 0..60),
        page,
        vec(0u8..4, 0..8),
        proptest::bool::weighted(0.25),
    )
        .prop_map(|(parts, page, appends, long_ids)| Case {
            parts,
            page,
            appends,
            bulk: 0,
            long_ids,
        })
}

/// Large cases: thousands of messages, pages around and above the cap.
pub fn large_case(sizes: Sizes) -> impl Strategy<Value = Case> {
    (
        vec(0u8..4, 0..8),
        sizes.listing(),
        large_page(),
        vec(0u8..4, 0..4),
        proptest::bool::weighted(0.25),
    )
        .prop_map(|(parts, bulk, page, appends, long_ids)| Case {
            parts,
            page,
            appends,
            bulk,
            long_ids,
        })
}

pub(crate) fn run(ctx: &Ctx<'_>) -> CaseRun {
    let sizes = Sizes::new(ctx.config.scale);
    crate::harness::run_scaled(ctx, Property::Pagination, case(), large_case(sizes), |c| {
        check(ctx, c)
    })
}

/// The `i`-th message: ids shaped as generated ones, `i` ids into one millisecond (the
/// counter borrows from the next one past 4,096), so they ascend in history order.
fn message(session: &SessionId, i: usize, parts: u8, long: bool) -> MessageWithParts {
    let ms = (T0 as u64) + i as u64 / 4096;
    let mut id = real_id("msg", ms, (i % 4096) as u16, i as u64);
    if long {
        // A common stem, then the generated id: 256 bytes, ascending as the ids do.
        id = format!("{}{}", "m".repeat(MAX_EXTERNAL_ID_LEN - id.len()), id);
    }
    let id = MessageId::from(id);
    let kind = if i.is_multiple_of(2) {
        MessageKind::User
    } else {
        MessageKind::Assistant
    };
    MessageWithParts {
        info: model::message(session, &id, kind, (i % 200) as u8),
        parts: (0..parts)
            .map(|j| {
                let pid = PartId::from(format!("prt_{i:05}_{j}"));
                model::part(session, &id, &pid, PartKind::Text, j)
            })
            .collect(),
    }
}

/// The events writing `m`, parts in reverse id order so the store has to sort them.
fn write(m: &MessageWithParts) -> Vec<SyncEvent> {
    let mut events = vec![SyncEvent::MessageUpdated {
        info: m.info.clone(),
    }];
    events.extend(
        m.parts
            .iter()
            .rev()
            .map(|p| SyncEvent::PartUpdated { part: p.clone() }),
    );
    events
}

struct Session<'a> {
    store: &'a dyn Store,
    tenant: TenantId,
    id: SessionId,
    seq: u64,
}

impl Session<'_> {
    async fn append(&mut self, m: &MessageWithParts) -> Result<(), String> {
        self.append_all(std::slice::from_ref(m)).await
    }

    /// Writes `ms` in one batch.
    async fn append_all(&mut self, ms: &[MessageWithParts]) -> Result<(), String> {
        let events: Vec<SyncEvent> = ms.iter().flat_map(write).collect();
        let n = events.len() as u64;
        self.store
            .apply(&envs(&self.tenant, self.seq + 1, events))
            .await
            .map_err(ctx_err(format!("writing {} messages", ms.len())))?;
        self.seq += n;
        Ok(())
    }

    /// Pages newest-first with `limit`, appending after each read; returns the pages.
    async fn pages(
        &mut self,
        limit: usize,
        appends: &[u8],
        fresh: &mut dyn FnMut() -> MessageWithParts,
    ) -> Result<Vec<Vec<MessageWithParts>>, String> {
        let mut pages = Vec::new();
        let mut cursor: Option<Cursor> = None;
        loop {
            let page = self
                .store
                .messages(&self.tenant, &self.id, cursor.as_ref(), limit)
                .await
                .map_err(ctx_err(format!(
                    "messages(limit {limit}, page {})",
                    pages.len()
                )))?;
            pages.push(page.messages);
            for _ in 0..appends.get(pages.len() - 1).copied().unwrap_or(0) {
                let m = fresh();
                self.append(&m).await?;
            }
            match page.next {
                None => return Ok(pages),
                // Clients carry the cursor as a string (e.g. in a URL).
                Some(c) => {
                    let s = c.to_string();
                    cursor = Some(s.parse().map_err(|e| format!("cursor {s:?}: {e}"))?);
                }
            }
            if pages.len() > 10_000 {
                return Err("paging did not end after 10000 pages".into());
            }
        }
    }
}

/// Pages must be full except the last, ascending inside, and concatenate to `expected`.
fn check_pages(
    what: &str,
    limit: usize,
    pages: &[Vec<MessageWithParts>],
    expected: &[MessageWithParts],
) -> Result<(), String> {
    let cap = clamp_limit(limit);
    for (i, p) in pages.iter().enumerate() {
        let last = i + 1 == pages.len();
        if p.len() > cap || (!last && p.len() != cap) {
            return Err(format!(
                "{what}: page {i} holds {} messages; pages hold {cap} (the last at most {cap})",
                p.len()
            ));
        }
        if p.is_empty() && !expected.is_empty() {
            return Err(format!(
                "{what}: page {i} is empty but the previous page had a next cursor"
            ));
        }
        if let Some(w) = p.windows(2).find(|w| w[0].info.id >= w[1].info.id) {
            return Err(format!(
                "{what}: page {i} is not oldest → newest: {} before {}",
                w[0].info.id, w[1].info.id
            ));
        }
    }
    let all: Vec<MessageWithParts> = pages.iter().rev().flatten().cloned().collect();
    if all.len() != expected.len() {
        let ids = |v: &[MessageWithParts]| -> Vec<String> {
            v.iter().map(|m| m.info.id.to_string()).collect()
        };
        return Err(format!(
            "{what}: paging yielded {} messages, the history has {}:\n  expected ids: {:?}\n  \
             yielded ids:  {:?}",
            all.len(),
            expected.len(),
            ids(expected),
            ids(&all)
        ));
    }
    same(what, &expected.to_vec(), &all)
}

pub(crate) fn check(ctx: &Ctx<'_>, case: &Case) -> Result<(), String> {
    ctx.block(async {
        let b = ctx.backend().await?;
        let tenant = b.tenant();
        let id = if case.long_ids {
            SessionId::from(format!(
                "ses_paging_{}",
                "s".repeat(MAX_EXTERNAL_ID_LEN - 11)
            ))
        } else {
            SessionId::from("ses_paging")
        };
        let mut s = Session {
            store: b.store.as_ref(),
            tenant: tenant.clone(),
            id: id.clone(),
            seq: 1,
        };
        let empty = s
            .store
            .messages(&tenant, &id, None, 10)
            .await
            .map_err(ctx_err("messages() of an unknown session"))?;
        if !empty.messages.is_empty() || empty.next.is_some() {
            return Err("an unknown session must yield an empty page without cursor".into());
        }
        s.store
            .apply(&envs(
                &tenant,
                1,
                vec![SyncEvent::SessionUpdated {
                    info: model::session(&id, 0),
                }],
            ))
            .await
            .map_err(ctx_err("writing the session"))?;
        let history: Vec<MessageWithParts> = case
            .parts
            .iter()
            .copied()
            .chain(std::iter::repeat_n(1, usize::from(case.bulk)))
            .enumerate()
            .map(|(i, k)| message(&id, i, k, case.long_ids))
            .collect();
        let chunk = if history.len() > SWEEP { 400 } else { 8 };
        for chunk in history.chunks(chunk) {
            s.append_all(chunk).await?;
        }
        ctx.stats.history(history.len());
        let mut never = || -> MessageWithParts { unreachable!("no appends in the sweep") };
        // Every page size, from 1 to one past the history, plus default and oversized;
        // for a long history the sizes around the cap.
        let sizes: Vec<usize> = if history.len() <= SWEEP {
            (1..=history.len() + 1).chain([0, 5_000]).collect()
        } else {
            let cap = MAX_PAGE_LIMIT;
            vec![0, cap - 1, cap, cap + 1, 5_000, usize::MAX]
        };
        for limit in sizes {
            let pages = s.pages(limit, &[], &mut never).await?;
            check_pages(&format!("page size {limit}"), limit, &pages, &history)?;
        }
        // Appends between page reads: this pass still yields the history it started
        // from, exactly once; the next pass yields everything.
        let limit = usize::from(case.page);
        let mut next = history.len();
        let mut appended = Vec::new();
        let mut fresh = || {
            let m = message(&id, next, 1, case.long_ids);
            next += 1;
            appended.push(m.clone());
            m
        };
        let pages = s.pages(limit, &case.appends, &mut fresh).await?;
        check_pages(
            &format!("page size {limit} with appends between reads"),
            limit,
            &pages,
            &history,
        )?;
        let all: Vec<MessageWithParts> = history.iter().chain(&appended).cloned().collect();
        ctx.stats.history(all.len());
        let pages = s.pages(limit, &[], &mut never).await?;
        check_pages(
            &format!("page size {limit} after the appends"),
            limit,
            &pages,
            &all,
        )?;
        b.cleanup().await;
        Ok(())
    })
}
