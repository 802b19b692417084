//! The read path: whole-history paging and `filter_compacted`, the view sent to the model.

use std::collections::HashSet;

use crate::error::Result;
use crate::id::{MessageId, SessionId};
use crate::model::{MessageWithParts, PartBody};
use crate::store::{Cursor, Store, DEFAULT_PAGE_LIMIT};
use crate::tenant::TenantId;

/// Reads a session's whole history, oldest → newest, by paging newest-first.
pub async fn read_all(
    store: &dyn Store,
    tenant: &TenantId,
    session: &SessionId,
    page_size: usize,
) -> Result<Vec<MessageWithParts>> {
    let mut pages = Vec::new();
    let mut cursor: Option<Cursor> = None;
    loop {
        let page = store
            .messages(tenant, session, cursor.as_ref(), page_size)
            .await?;
        pages.push(page.messages);
        match page.next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    Ok(pages.into_iter().rev().flatten().collect())
}

/// The compacted view of a session.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CompactedView {
    /// The messages the model sees, in the order it sees them.
    pub messages: Vec<MessageWithParts>,
    /// The compaction user message the view starts at, if a boundary was hit; older
    /// messages (other than a kept tail) are hidden from the model but still stored.
    pub boundary: Option<MessageId>,
    /// How many kept tail messages were placed after the summary.
    pub tail: usize,
}

fn is_successful_summary(m: &MessageWithParts) -> Option<&MessageId> {
    let a = m.info.as_assistant()?;
    (a.summary == Some(true) && a.finish.is_some() && a.error.is_none()).then_some(&a.parent_id)
}

/// `None`: not a compaction request; `Some(tail)`: one, with its optional tail start.
#[allow(clippy::option_option)]
fn tail_start(m: &MessageWithParts) -> Option<Option<&MessageId>> {
    if !m.info.is_user() {
        return None;
    }
    let mut parts = m.parts.iter().filter_map(|p| match &p.body {
        PartBody::Compaction(c) => Some(c.tail_start_id.as_ref()),
        _ => None,
    });
    let first = parts.next()?;
    Some(first.or_else(|| parts.flatten().next()))
}

/// Places the kept tail right after the summary that closed the boundary.
fn assemble(
    mut view: Vec<MessageWithParts>,
    boundary: &MessageId,
    tail: Vec<MessageWithParts>,
) -> Vec<MessageWithParts> {
    if tail.is_empty() {
        return view;
    }
    let at = view
        .iter()
        .position(|m| is_successful_summary(m) == Some(boundary))
        .map_or(view.len(), |i| i + 1);
    view.splice(at..at, tail);
    view
}

/// `filter_compacted` over a full history (oldest → newest): the reference definition.
///
/// Scan newest → oldest: push the message; stop after a user message whose id was
/// completed by a newer successful summary and that has a compaction part; an assistant
/// message with `summary`, `finish` and no `error` completes its `parent_id`. Reverse.
/// With `tail_start_id`, messages from that id up to the compaction message are kept
/// and placed after the summary.
pub fn filter_compacted_reference(history: &[MessageWithParts]) -> CompactedView {
    let mut completed: HashSet<&MessageId> = HashSet::new();
    let mut out = Vec::new();
    for (i, m) in history.iter().enumerate().rev() {
        out.push(m.clone());
        if completed.contains(&m.info.id) {
            if let Some(tail_from) = tail_start(m) {
                out.reverse();
                let tail: Vec<MessageWithParts> = match tail_from {
                    Some(t) => history[..i]
                        .iter()
                        .filter(|o| &o.info.id >= t)
                        .cloned()
                        .collect(),
                    None => Vec::new(),
                };
                let n = tail.len();
                return CompactedView {
                    messages: assemble(out, &m.info.id, tail),
                    boundary: Some(m.info.id.clone()),
                    tail: n,
                };
            }
        }
        if let Some(parent) = is_successful_summary(m) {
            completed.insert(parent);
        }
    }
    out.reverse();
    CompactedView {
        messages: out,
        boundary: None,
        tail: 0,
    }
}

/// `filter_compacted` through a store: reads pages newest-first and stops at the
/// boundary (or, with a tail, at the tail's first message), so its cost grows with what
/// follows the boundary, not with the whole history. Equal to
/// [`filter_compacted_reference`] over the full history.
pub async fn filter_compacted(
    store: &dyn Store,
    tenant: &TenantId,
    session: &SessionId,
) -> Result<CompactedView> {
    filter_compacted_paged(store, tenant, session, DEFAULT_PAGE_LIMIT).await
}

/// [`filter_compacted`] with an explicit page size.
pub async fn filter_compacted_paged(
    store: &dyn Store,
    tenant: &TenantId,
    session: &SessionId,
    page_size: usize,
) -> Result<CompactedView> {
    let mut completed: HashSet<MessageId> = HashSet::new();
    let mut out: Vec<MessageWithParts> = Vec::new();
    let mut cursor: Option<Cursor> = None;
    loop {
        let page = store
            .messages(tenant, session, cursor.as_ref(), page_size)
            .await?;
        let mut newest_first = page.messages.into_iter().rev();
        while let Some(m) = newest_first.next() {
            let boundary = completed
                .contains(&m.info.id)
                .then(|| tail_start(&m))
                .flatten();
            if let Some(tail_from) = boundary {
                let tail_from = tail_from.cloned();
                let id = m.info.id.clone();
                out.push(m);
                out.reverse();
                let tail = match tail_from {
                    Some(t) => {
                        read_tail(
                            store,
                            tenant,
                            session,
                            page_size,
                            newest_first,
                            page.next,
                            &t,
                        )
                        .await?
                    }
                    None => Vec::new(),
                };
                let n = tail.len();
                return Ok(CompactedView {
                    messages: assemble(out, &id, tail),
                    boundary: Some(id),
                    tail: n,
                });
            }
            if let Some(parent) = is_successful_summary(&m) {
                completed.insert(parent.clone());
            }
            out.push(m);
        }
        match page.next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    out.reverse();
    Ok(CompactedView {
        messages: out,
        boundary: None,
        tail: 0,
    })
}

/// Collects messages with id `>= from`, continuing from the rest of the current page
/// (newest first) into older pages, and returns them oldest → newest.
async fn read_tail(
    store: &dyn Store,
    tenant: &TenantId,
    session: &SessionId,
    page_size: usize,
    rest_of_page: impl Iterator<Item = MessageWithParts>,
    mut next: Option<Cursor>,
    from: &MessageId,
) -> Result<Vec<MessageWithParts>> {
    let mut tail = Vec::new();
    for m in rest_of_page {
        if &m.info.id < from {
            tail.reverse();
            return Ok(tail);
        }
        tail.push(m);
    }
    while let Some(c) = next.take() {
        let page = store.messages(tenant, session, Some(&c), page_size).await?;
        for m in page.messages.into_iter().rev() {
            if &m.info.id < from {
                tail.reverse();
                return Ok(tail);
            }
            tail.push(m);
        }
        next = page.next;
    }
    tail.reverse();
    Ok(tail)
}
