//! The one store read the Processor's decisions need: the call of an earlier message
//! that waits for the user's approval, which a result or an approval response of a
//! later message may address. The shell answers [`Machine::lookup`](super::Machine::lookup)
//! with it.

use crate::error::Result;
use crate::id::SessionId;
use crate::model::{Part, PartBody};
use crate::store::Store;
use crate::tenant::TenantId;

/// How deep [`waiting_call`] looks for a call waiting for approval, in messages.
pub const APPROVAL_SEARCH_MESSAGES: usize = 1000;

/// The tool part of `session` that waits for approval with `call_id`: the newest such
/// call, searched from the newest message back, at most [`APPROVAL_SEARCH_MESSAGES`]
/// messages deep. Reads only what `store` has applied: a caller whose projector
/// batches commits syncs it first.
///
/// # Errors
/// Store errors from reading the session's messages.
pub async fn waiting_call(
    store: &dyn Store,
    tenant: &TenantId,
    session: &SessionId,
    call_id: &str,
) -> Result<Option<Part>> {
    let mut cursor = None;
    let mut seen = 0;
    while seen < APPROVAL_SEARCH_MESSAGES {
        let page = store
            .messages(tenant, session, cursor.as_ref(), 100)
            .await?;
        seen += page.messages.len();
        for m in page.messages.iter().rev() {
            let found = m.parts.iter().find(|p| match &p.body {
                PartBody::Tool(t) => t.call_id == call_id && t.awaits_approval(),
                _ => false,
            });
            if let Some(p) = found {
                return Ok(Some(p.clone()));
            }
        }
        match page.next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    Ok(None)
}
