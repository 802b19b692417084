//! Fork: a new session holding a session's history up to a point.
//!
//! A fork copies: the new session gets its own messages and parts, with new ids
//! (generated, so they sort in the source's order), the assistant messages' `parentID`
//! and a compaction's `tail_start_id` remapped to the copies, every other field as it
//! is. Afterwards the two sessions are independent: writing either never changes the
//! other. Large values stored once ([`crate::blob`]) are not copied: the copies
//! reference the same blobs.
//!
//! The new session records where it came from, as opencode does: `parentID` is the
//! source session, and `forkedFrom` (`{"sessionID", "messageID"}`, a field the model
//! keeps among the session's unknown fields) the source and the last message copied
//! (absent when the source had none).
//!
//! [`plan`] reads the source and builds the batch (the new session row, then each
//! message with its parts); the caller commits it as one batch through a projector, so
//! the fork appears whole or not at all, and subscribers see it after the commit.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::event::SyncEvent;
use crate::id::{MessageId, PartId, SessionId};
use crate::model::{PartBody, Session};
use crate::read::read_all;
use crate::store::Store;
use crate::tenant::TenantId;

/// The session field that records a fork's origin.
pub const FORKED_FROM: &str = "forkedFrom";

/// Where a fork ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ForkPoint {
    /// The whole history.
    All,
    /// The history up to and including this message.
    Through(MessageId),
    /// The history before this message (opencode's `messageID` of a fork).
    Before(MessageId),
}

/// A fork ready to commit ([`plan`]).
#[derive(Clone, Debug)]
pub struct ForkPlan {
    /// The new session.
    pub session: Session,
    /// The batch: the session row, then each message and its parts.
    pub events: Vec<SyncEvent>,
    /// Messages copied.
    pub messages: u64,
    /// Parts copied.
    pub parts: u64,
}

/// Reads `source` and builds its fork at `point`: a new session titled after it,
/// created at `now_ms`.
///
/// # Errors
/// [`Error::NotFound`] when the source session does not exist, or when `point` names a
/// message it does not hold; the store's error.
pub async fn plan(
    store: &dyn Store,
    tenant: &TenantId,
    source: &SessionId,
    point: &ForkPoint,
    now_ms: i64,
) -> Result<ForkPlan> {
    let src = store
        .session(tenant, source)
        .await?
        .ok_or_else(|| Error::not_found("session", source))?;
    let history = read_all(store, tenant, source, 1000).await?;
    let cut = match point {
        ForkPoint::All => history.len(),
        ForkPoint::Through(m) | ForkPoint::Before(m) => {
            let at = history
                .iter()
                .position(|h| &h.info.id == m)
                .ok_or_else(|| Error::not_found("message", format!("{m} in session {source}")))?;
            if matches!(point, ForkPoint::Through(_)) {
                at + 1
            } else {
                at
            }
        }
    };
    let copied = &history[..cut];
    let mut session = Session::new(fork_title(&src.info.title), now_ms);
    session.parent_id = Some(source.clone());
    let mut origin = json!({ "sessionID": source.as_str() });
    if let Some(last) = copied.last() {
        origin["messageID"] = Value::String(last.info.id.as_str().to_owned());
    }
    session.extra.insert(FORKED_FROM.to_owned(), origin);

    let ids: HashMap<MessageId, MessageId> = copied
        .iter()
        .map(|m| (m.info.id.clone(), MessageId::generate()))
        .collect();
    let mut events = vec![SyncEvent::SessionUpdated {
        info: session.clone(),
    }];
    let mut parts = 0u64;
    for m in copied {
        let mut info = m.info.clone();
        let new_id = ids[&info.id].clone();
        info.id = new_id.clone();
        info.session_id = session.id.clone();
        if let Some(a) = info.as_assistant_mut() {
            if let Some(p) = ids.get(&a.parent_id) {
                a.parent_id = p.clone();
            }
        }
        events.push(SyncEvent::MessageUpdated { info });
        for p in &m.parts {
            let mut part = p.clone();
            part.id = PartId::generate();
            part.session_id = session.id.clone();
            part.message_id = new_id.clone();
            if let PartBody::Compaction(c) = &mut part.body {
                if let Some(t) = c.tail_start_id.as_ref().and_then(|t| ids.get(t)) {
                    c.tail_start_id = Some(t.clone());
                }
            }
            events.push(SyncEvent::PartUpdated { part });
            parts += 1;
        }
    }
    Ok(ForkPlan {
        session,
        events,
        messages: copied.len() as u64,
        parts,
    })
}

/// `Title (fork)`, or `Title (fork #n+1)` for a title that ends in `(fork #n)` /
/// `(fork)`, as opencode names forks.
pub fn fork_title(title: &str) -> String {
    let t = title.trim_end();
    if let Some(base) = t.strip_suffix(" (fork)") {
        return format!("{base} (fork #2)");
    }
    if let Some((base, n)) = t
        .strip_suffix(')')
        .and_then(|s| s.rsplit_once(" (fork #"))
        .and_then(|(b, n)| n.parse::<u64>().ok().map(|n| (b, n)))
    {
        return format!("{base} (fork #{})", n + 1);
    }
    format!("{t} (fork)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fork_titles_count_up() {
        assert_eq!(fork_title("Fix CI"), "Fix CI (fork)");
        assert_eq!(fork_title("Fix CI (fork)"), "Fix CI (fork #2)");
        assert_eq!(fork_title("Fix CI (fork #2)"), "Fix CI (fork #3)");
        assert_eq!(fork_title("a (fork #x)"), "a (fork #x) (fork)");
    }
}
