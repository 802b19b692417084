//! Decoding stored rows: every row keeps its JSON next to the indexed columns, and the
//! JSON is the whole truth (ids included), so reading is parsing it.

use forge_core::{Error, Message, MessageWithParts, Part, Result, Session, SessionState};
use serde::de::DeserializeOwned;

/// Parses a stored JSON row, naming the row in the error.
pub(crate) fn from_json<T: DeserializeOwned>(
    json: &str,
    what: impl FnOnce() -> String,
) -> Result<T> {
    serde_json::from_str(json).map_err(|e| Error::codec(format!("{} does not decode", what()), e))
}

/// A session row: its JSON and `seq` (stored as the `i64` of the same bits).
pub(crate) fn session_state(tenant: &str, seq: i64, body: &str) -> Result<SessionState> {
    let info: Session = from_json(body, || format!("session row of tenant {tenant}"))?;
    Ok(SessionState {
        info,
        seq: seq_from_sql(seq),
    })
}

/// A message row.
pub(crate) fn message(tenant: &str, body: &str) -> Result<Message> {
    from_json(body, || format!("message row of tenant {tenant}"))
}

/// A part row.
pub(crate) fn part(tenant: &str, body: &str) -> Result<Part> {
    from_json(body, || format!("part row of tenant {tenant}"))
}

/// `seq` is a `u64`; SQL integers are `i64`. The column holds the same 64 bits, so every
/// value round-trips and values up to `i64::MAX` read naturally in SQL.
pub(crate) fn seq_to_sql(seq: u64) -> i64 {
    seq as i64
}

/// The inverse of [`seq_to_sql`].
pub(crate) fn seq_from_sql(seq: i64) -> u64 {
    seq as u64
}

/// Groups parts (ordered by message, then part id) under their messages (ordered by id).
///
/// Parts come from one range query over the page's messages, so each part's message is
/// in `messages`; a part whose message is not there means the tables disagree.
pub(crate) fn attach_parts(
    messages: Vec<Message>,
    parts: Vec<Part>,
    backend: &'static str,
) -> Result<Vec<MessageWithParts>> {
    let mut out: Vec<MessageWithParts> = messages
        .into_iter()
        .map(|info| MessageWithParts {
            info,
            parts: Vec::new(),
        })
        .collect();
    let mut i = 0;
    for part in parts {
        while i < out.len() && out[i].info.id != part.message_id {
            i += 1;
        }
        match out.get_mut(i) {
            Some(m) => m.parts.push(part),
            None => {
                return Err(Error::corrupted(
                    format!("{backend} part {}", part.id),
                    format!(
                        "names message {}, which is not among the messages read",
                        part.message_id
                    ),
                ))
            }
        }
    }
    Ok(out)
}
