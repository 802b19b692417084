//! Revert and restore, with opencode's semantics.
//!
//! A session's `revert` field (`{"messageID", "partID"?}`, kept among the session row's
//! fields) marks a point. While it is set, what follows the point is hidden: every
//! message after `messageID`, and `messageID` itself — or, with `partID`, only that
//! message's parts from `partID` on. Hidden rows stay stored until one of:
//!
//! - **restore** (opencode's `unrevert`): the mark is cleared, everything is visible
//!   again;
//! - **commit**: the hidden rows are removed and the mark cleared, in one batch. A new
//!   user message written to a reverted session commits first, in the same batch as
//!   the message ([`crate::turn::TurnDriver::write_user`]), as opencode's prompt loop
//!   cleans up before it prompts.
//!
//! Which reads hide: the compacted view (what the model is sent) and the history the
//! facade pages (`Forge::history`, `history_all`); exports and the store's own reads
//! (`Store::messages`, opencode's `GET /session/{id}/message`, which opencode's clients
//! filter themselves by the session's `revert`) return everything, with the mark.

use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::event::SyncEvent;
use crate::id::{MessageId, PartId, SessionId};
use crate::model::{MessageWithParts, Session};

/// The session field that holds the mark.
pub const REVERT: &str = "revert";

/// A revert point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mark {
    /// The first message hidden (or, with `part`, the message whose later parts are).
    pub message: MessageId,
    /// The first part hidden, in `message`.
    pub part: Option<PartId>,
}

/// The session's mark, if it has one.
pub fn mark(session: &Session) -> Option<Mark> {
    let v = session.extra.get(REVERT)?;
    let message = v.get("messageID")?.as_str()?;
    Some(Mark {
        message: MessageId::from(message),
        part: v.get("partID").and_then(Value::as_str).map(PartId::from),
    })
}

/// Sets the session's mark (`None` clears it).
pub fn set(session: &mut Session, mark: Option<&Mark>) {
    match mark {
        None => {
            session.extra.remove(REVERT);
        }
        Some(m) => {
            let mut v = json!({ "messageID": m.message.as_str() });
            if let Some(p) = &m.part {
                v["partID"] = Value::String(p.as_str().to_owned());
            }
            session.extra.insert(REVERT.to_owned(), v);
        }
    }
}

/// Checks that `mark` names a message of `history` (and a part of it).
///
/// # Errors
/// [`Error::NotFound`] naming what is missing.
pub fn check(history: &[MessageWithParts], session: &SessionId, mark: &Mark) -> Result<()> {
    let m = history
        .iter()
        .find(|m| m.info.id == mark.message)
        .ok_or_else(|| {
            Error::not_found("message", format!("{} in session {session}", mark.message))
        })?;
    if let Some(p) = &mark.part {
        if !m.parts.iter().any(|x| &x.id == p) {
            return Err(Error::not_found(
                "part",
                format!("{p} in message {} of session {session}", mark.message),
            ));
        }
    }
    Ok(())
}

/// Whether message `m` is hidden whole by `mark`.
fn hides_message(mark: &Mark, m: &MessageId) -> bool {
    m > &mark.message || (m == &mark.message && mark.part.is_none())
}

/// Whether `mark` hides part `part` of message `message` (the part's message follows
/// the point, or is the point and the part sorts at or after the marked part).
pub fn hides(mark: &Mark, message: &MessageId, part: &crate::id::PartId) -> bool {
    hides_message(mark, message)
        || (message == &mark.message && mark.part.as_ref().is_some_and(|p| part >= p))
}

/// `history` (oldest first) as a reverted session shows it.
pub fn visible(mut history: Vec<MessageWithParts>, mark: &Mark) -> Vec<MessageWithParts> {
    history.retain(|m| !hides_message(mark, &m.info.id));
    if let (Some(p), Some(last)) = (&mark.part, history.last_mut()) {
        if last.info.id == mark.message {
            if let Some(at) = last.parts.iter().position(|x| &x.id == p) {
                last.parts.truncate(at);
            }
        }
    }
    history
}

/// The batch that commits a revert of `session`: a removal of every hidden message and
/// part of `history`, then the session row without the mark.
pub fn commit(session: &Session, history: &[MessageWithParts], mark: &Mark) -> Vec<SyncEvent> {
    let mut events = Vec::new();
    for m in history {
        if hides_message(mark, &m.info.id) {
            events.push(SyncEvent::MessageRemoved {
                session_id: session.id.clone(),
                message_id: m.info.id.clone(),
            });
        } else if m.info.id == mark.message {
            if let Some(p) = &mark.part {
                if let Some(at) = m.parts.iter().position(|x| &x.id == p) {
                    for part in &m.parts[at..] {
                        events.push(SyncEvent::PartRemoved {
                            session_id: session.id.clone(),
                            message_id: m.info.id.clone(),
                            part_id: part.id.clone(),
                        });
                    }
                }
            }
        }
    }
    let mut cleared = session.clone();
    set(&mut cleared, None);
    events.push(SyncEvent::SessionUpdated { info: cleared });
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_round_trips_through_the_session_row() {
        let mut s = Session::new("t", 0);
        assert_eq!(mark(&s), None);
        let m = Mark {
            message: MessageId::from("msg_2"),
            part: Some(PartId::from("prt_1")),
        };
        set(&mut s, Some(&m));
        let back: Session = serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
        assert_eq!(mark(&back), Some(m));
        set(&mut s, None);
        assert_eq!(mark(&s), None);
    }
}
