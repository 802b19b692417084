//! Import and export: whole sessions in the shape the opencode agent exports.
//!
//! Two input shapes are accepted:
//! - one JSON document `{"info": Session, "messages": [{"info": Message, "parts": [Part]}]}`
//!   (what `export` writes);
//! - JSONL, one `{"info": Message, "parts": [Part]}` object per line; each session is
//!   then created from the messages' `sessionID` with an empty title (or continued if it
//!   already exists).
//!
//! Ids, times and unknown fields are kept as they are (the model keeps unknown fields
//! and unknown part kinds), so `export` of an imported session gives back the same JSON
//! value.
//!
//! Import is all or nothing per input. Everything is parsed and checked before
//! anything is written; then each session is one batch (`session.updated` if it is
//! written, then every message with its parts), which a store applies whole or not at
//! all. If a later session's batch fails, the sessions written before are undone:
//! a session the import created is deleted, and in a session that existed the
//! messages the import added are removed and the ones it overwrote are put back as
//! they were. Nothing that existed before is deleted.

use std::collections::{HashMap, HashSet};

use forge_core::model::{JsonMap, SessionTime};
use forge_core::projector::Scope;
use forge_core::store::MAX_PAGE_LIMIT;
use forge_core::{
    read_all, Engine, MessageId, MessageWithParts, PartId, Session, SessionId, SyncEvent, TenantId,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::Instrument;

use crate::error::{classify, Error, Result};

/// A whole session: the document `export` writes and `import` reads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Export {
    /// The session.
    pub info: Session,
    /// Its messages with their parts, oldest first.
    pub messages: Vec<MessageWithParts>,
}

/// What `import` wrote for one session.
#[derive(Clone, Debug, Serialize)]
pub struct ImportedSession {
    /// The session.
    pub id: SessionId,
    /// Whether it was written (`session.updated`) rather than continued as it was.
    pub session_written: bool,
    /// Messages written.
    pub messages: usize,
    /// Parts written.
    pub parts: usize,
    /// Of the messages written, those that were stored already (same id) and were
    /// overwritten.
    pub replaced: usize,
}

/// Parsed input: sessions to write (`None`: create or continue from the messages), each
/// with its messages in file order.
struct Parsed {
    sessions: Vec<(SessionId, Option<Session>, Vec<MessageWithParts>)>,
}

fn from_value<T: serde::de::DeserializeOwned>(v: Value, what: &str) -> Result<T> {
    serde_json::from_value(v).map_err(|e| Error::input_with(what, e.to_string(), e))
}

fn parse_document(mut doc: JsonMap) -> Result<Parsed> {
    let info: Session = from_value(doc.remove("info").unwrap_or(Value::Null), "info")?;
    let Some(Value::Array(items)) = doc.remove("messages") else {
        return Err(Error::input("messages", "`messages` must be an array"));
    };
    let mut messages = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let m: MessageWithParts = from_value(item, &format!("messages[{i}]"))?;
        if m.info.session_id != info.id {
            return Err(Error::input(
                format!("messages[{i}]"),
                format!(
                    "message {} belongs to session {}, but the document is session {}",
                    m.info.id, m.info.session_id, info.id
                ),
            ));
        }
        messages.push(m);
    }
    Ok(Parsed {
        sessions: vec![(info.id.clone(), Some(info), messages)],
    })
}

fn parse_lines(text: &str) -> Result<Parsed> {
    let mut order: Vec<SessionId> = Vec::new();
    let mut by_session: HashMap<SessionId, Vec<MessageWithParts>> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line).map_err(|e| {
            let msg = e.to_string();
            let msg = msg.split(" at line ").next().unwrap_or(&msg).to_owned();
            let message = format!("malformed JSON at column {}: {msg}", e.column());
            Error::input_with(format!("line {n}"), message, e)
        })?;
        let m: MessageWithParts = from_value(v, &format!("line {n}"))?;
        let sid = m.info.session_id.clone();
        by_session
            .entry(sid.clone())
            .or_insert_with(|| {
                order.push(sid);
                Vec::new()
            })
            .push(m);
    }
    Ok(Parsed {
        sessions: order
            .into_iter()
            .map(|sid| {
                let msgs = by_session.remove(&sid).unwrap_or_default();
                (sid, None, msgs)
            })
            .collect(),
    })
}

fn parse(text: &str) -> Result<Parsed> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(doc)) if doc.contains_key("messages") => parse_document(doc),
        // A single `{info, parts}` object (possibly pretty-printed) is one message.
        Ok(Value::Object(doc)) if doc.contains_key("parts") => {
            let m: MessageWithParts = from_value(Value::Object(doc), "message")?;
            Ok(Parsed {
                sessions: vec![(m.info.session_id.clone(), None, vec![m])],
            })
        }
        Ok(_) => Err(Error::input(
            "document",
            "expected an export document {\"info\", \"messages\"} or one \
             {\"info\", \"parts\"} object per line",
        )),
        Err(_) => parse_lines(text),
    }
}

/// A session made from its messages: empty title, times spanning the messages.
fn session_from(id: &SessionId, messages: &[MessageWithParts]) -> Session {
    let created = messages.iter().filter_map(|m| m.info.created()).min();
    let updated = messages
        .iter()
        .filter_map(|m| {
            let done = m.info.as_assistant().and_then(|a| a.time.completed);
            done.into_iter().chain(m.info.created()).max()
        })
        .max();
    let now = forge_core::id::now_ms();
    Session {
        id: id.clone(),
        parent_id: None,
        title: String::new(),
        time: SessionTime {
            created: created.unwrap_or(now),
            updated: updated.or(created).unwrap_or(now),
            extra: JsonMap::new(),
        },
        extra: JsonMap::new(),
    }
}

/// Checks everything from outside before anything is written: every id
/// ([`forge_core::id::check_external`]), parts that name their own session and
/// message, and no message or part id twice in one input (no silent last-wins).
fn check(parsed: &Parsed) -> Result<()> {
    use std::collections::HashSet;
    let bad = |at: String, e: forge_core::Error| Error::input_with(at, e.to_string(), e);
    let mut messages = HashSet::new();
    let mut parts = HashSet::new();
    for (sid, _, msgs) in &parsed.sessions {
        sid.check()
            .map_err(|e| bad(format!("session {sid:?}"), e))?;
        for m in msgs {
            let at = format!("message {:?}", m.info.id.as_str());
            m.info.id.check().map_err(|e| bad(at.clone(), e))?;
            if !messages.insert(m.info.id.clone()) {
                return Err(Error::input(at, "appears twice in the input"));
            }
            for p in &m.parts {
                let at = format!("{at}: part {:?}", p.id.as_str());
                p.id.check().map_err(|e| bad(at.clone(), e))?;
                if p.session_id != *sid || p.message_id != m.info.id {
                    return Err(Error::input(
                        at,
                        format!(
                            "names session {} and message {}, but it is listed under session \
                             {sid} and message {}",
                            p.session_id, p.message_id, m.info.id
                        ),
                    ));
                }
                if !parts.insert(p.id.clone()) {
                    return Err(Error::input(at, "appears twice in the input"));
                }
            }
        }
    }
    Ok(())
}

/// Imports `text` (either shape) into `engine`, all of it or nothing (see the module
/// docs); `progress` is called after each session's batch with (messages written,
/// messages in all).
pub(crate) async fn import(
    engine: &Engine,
    tenant: &TenantId,
    text: &str,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Vec<ImportedSession>> {
    let parsed = parse(text)?;
    check(&parsed)?;
    let total: usize = parsed.sessions.iter().map(|(_, _, m)| m.len()).sum();
    let span = tracing::info_span!(
        "import",
        %tenant,
        sessions = parsed.sessions.len(),
        messages = total
    );
    write_sessions(engine, tenant, parsed, total, progress)
        .instrument(span)
        .await
}

/// One session of the input, ready to write.
struct Plan {
    id: SessionId,
    /// The session row to write: the document's, or one made from the messages for a
    /// session that does not exist.
    info: Option<Session>,
    messages: Vec<MessageWithParts>,
    /// How to take the batch back.
    undo: Undo,
    /// Messages stored already (overwritten by the batch).
    replaced: usize,
}

/// How to take back a session's batch after a later one failed.
enum Undo {
    /// The session did not exist: delete it.
    Delete,
    /// It existed: restore what the batch overwrote, remove what it added.
    Restore {
        /// The session row as it was, if the batch overwrote it.
        info: Option<Session>,
        messages: Vec<Restore>,
    },
}

/// One message of a batch into an existing session.
struct Restore {
    id: MessageId,
    /// The parts the batch wrote.
    parts: Vec<PartId>,
    /// The message as stored before, if it was.
    before: Option<MessageWithParts>,
}

impl Undo {
    fn events(self, session: &SessionId) -> Vec<SyncEvent> {
        let Undo::Restore { info, messages } = self else {
            return vec![SyncEvent::SessionDeleted {
                session_id: session.clone(),
            }];
        };
        let mut events: Vec<SyncEvent> = info
            .map(|info| SyncEvent::SessionUpdated { info })
            .into_iter()
            .collect();
        for m in messages {
            let Some(before) = m.before else {
                events.push(SyncEvent::MessageRemoved {
                    session_id: session.clone(),
                    message_id: m.id,
                });
                continue;
            };
            let kept: HashSet<&PartId> = before.parts.iter().map(|p| &p.id).collect();
            for part_id in m.parts.iter().filter(|p| !kept.contains(p)) {
                events.push(SyncEvent::PartRemoved {
                    session_id: session.clone(),
                    message_id: m.id.clone(),
                    part_id: part_id.clone(),
                });
            }
            events.push(SyncEvent::MessageUpdated { info: before.info });
            events.extend(
                before
                    .parts
                    .into_iter()
                    .map(|part| SyncEvent::PartUpdated { part }),
            );
        }
        events
    }
}

/// Reads what the import would overwrite and decides what to write.
async fn plan(
    engine: &Engine,
    tenant: &TenantId,
    sid: SessionId,
    info: Option<Session>,
    messages: Vec<MessageWithParts>,
) -> Result<Plan> {
    let read = |e| Error::store(format!("reading session {sid}"), e);
    let before = engine.store.session(tenant, &sid).await.map_err(read)?;
    let Some(before) = before else {
        let info = info.unwrap_or_else(|| session_from(&sid, &messages));
        return Ok(Plan {
            id: sid,
            info: Some(info),
            messages,
            undo: Undo::Delete,
            replaced: 0,
        });
    };
    let mut restore = Vec::with_capacity(messages.len());
    for m in &messages {
        let stored = engine
            .store
            .message(tenant, &sid, &m.info.id)
            .await
            .map_err(read)?;
        restore.push(Restore {
            id: m.info.id.clone(),
            parts: m.parts.iter().map(|p| p.id.clone()).collect(),
            before: stored,
        });
    }
    let replaced = restore.iter().filter(|r| r.before.is_some()).count();
    Ok(Plan {
        undo: Undo::Restore {
            info: info.as_ref().map(|_| before.info),
            messages: restore,
        },
        id: sid,
        info,
        messages,
        replaced,
    })
}

async fn write_sessions(
    engine: &Engine,
    tenant: &TenantId,
    parsed: Parsed,
    total: usize,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Vec<ImportedSession>> {
    // Every session is claimed before it is read: what its plan reads (the report's
    // "replaced", and what a failure restores) is then what the import overwrites, not
    // what another writer may change before the claim.
    let mut claimed = Vec::with_capacity(parsed.sessions.len());
    for (sid, info, messages) in parsed.sessions {
        let scope = engine
            .scope(tenant, &sid)
            .await
            .map_err(|e| Error::store(format!("opening session {sid}"), e))?;
        claimed.push((scope, sid, info, messages));
    }
    let mut plans = Vec::with_capacity(claimed.len());
    for (scope, sid, info, messages) in claimed {
        plans.push((scope, plan(engine, tenant, sid, info, messages).await?));
    }
    let mut written = 0;
    let mut done = Vec::with_capacity(plans.len());
    let mut undo: Vec<(Scope, Undo)> = Vec::with_capacity(plans.len());
    for (scope, plan) in plans {
        let sid = plan.id.clone();
        let report = ImportedSession {
            id: sid.clone(),
            session_written: plan.info.is_some(),
            messages: plan.messages.len(),
            parts: plan.messages.iter().map(|m| m.parts.len()).sum(),
            replaced: plan.replaced,
        };
        let mut events = Vec::with_capacity(1 + report.messages + report.parts);
        events.extend(plan.info.map(|info| SyncEvent::SessionUpdated { info }));
        for m in plan.messages {
            events.push(SyncEvent::MessageUpdated { info: m.info });
            events.extend(
                m.parts
                    .into_iter()
                    .map(|part| SyncEvent::PartUpdated { part }),
            );
        }
        if let Err(e) = engine.projector.commit(&scope, events).await {
            let e = classify(format!("session {sid}"), "the import's batch", e);
            return Err(take_back(engine, undo, e).await);
        }
        undo.push((scope, plan.undo));
        written += report.messages;
        progress(written, total);
        done.push(report);
    }
    // A projector that holds writes back (group commit) commits them now, so that their
    // failure is still this import's to take back.
    if let Err(e) = engine.projector.sync().await {
        let e = Error::store("committing the import", e);
        return Err(take_back(engine, undo, e).await);
    }
    // Done with these sessions: the next writer (another server's import) need not
    // wait out the claims' leases.
    for (scope, _) in undo {
        let sid = scope.session_id.clone();
        if let Err(e) = engine.projector.release_scope(scope).await {
            tracing::warn!(session = %sid, error = %e, "releasing an imported session's claim");
        }
    }
    Ok(done)
}

/// Takes back the sessions written so far, newest first, after `error`; returns
/// `error`, noting if taking back failed too (and which sessions keep what the import
/// wrote).
async fn take_back(engine: &Engine, written: Vec<(Scope, Undo)>, error: Error) -> Error {
    let mut left: Vec<SessionId> = Vec::new();
    let mut first_failure = None;
    for (scope, undo) in written.into_iter().rev() {
        let sid = scope.session_id.clone();
        let events = undo.events(&sid);
        let undone = match engine.projector.commit(&scope, events).await {
            Ok(_) => engine.projector.sync().await,
            Err(e) => Err(e),
        };
        if let Err(e) = undone {
            tracing::error!(session = %sid, error = %e, "taking back an import failed");
            first_failure.get_or_insert(e);
            left.push(sid);
        }
    }
    let Some(failure) = first_failure else {
        return error;
    };
    let left: Vec<String> = left.iter().map(ToString::to_string).collect();
    let note = format!(
        "; taking back what the import wrote failed too ({failure}): sessions {} keep it",
        left.join(", ")
    );
    match error {
        Error::Store { action, source } => Error::Store {
            action: format!("{action}{note}"),
            source,
        },
        Error::Input {
            at,
            message,
            source,
        } => Error::Input {
            at,
            message: format!("{message}{note}"),
            source,
        },
        other => Error::store(format!("{other}{note}"), failure),
    }
}

/// Reads a whole session for export.
///
/// # Errors
/// [`Error::SessionNotFound`] when the session does not exist in `tenant`.
pub(crate) async fn export(
    engine: &Engine,
    tenant: &TenantId,
    session: &SessionId,
) -> Result<Export> {
    let state = crate::forge::require_session(engine, tenant, session).await?;
    let messages = read_all(engine.store.as_ref(), tenant, session, MAX_PAGE_LIMIT)
        .await
        .map_err(|e| Error::store(format!("reading session {session}"), e))?;
    Ok(Export {
        info: state.info,
        messages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(id: &str, session: &str, created: i64) -> Value {
        json!({
            "info": {"id": id, "sessionID": session, "role": "user",
                     "time": {"created": created}, "agent": "build"},
            "parts": [{"id": format!("prt_{id}"), "sessionID": session, "messageID": id,
                       "type": "text", "text": "hi"}]
        })
    }

    #[test]
    fn jsonl_groups_messages_by_session_in_first_seen_order() {
        let text = [
            message("msg_1", "ses_b", 5).to_string(),
            String::new(),
            message("msg_2", "ses_a", 7).to_string(),
            message("msg_3", "ses_b", 9).to_string(),
        ]
        .join("\n");
        let p = parse(&text).unwrap();
        let ids: Vec<(&str, usize)> = p
            .sessions
            .iter()
            .map(|(s, _, m)| (s.as_str(), m.len()))
            .collect();
        assert_eq!(ids, [("ses_b", 2), ("ses_a", 1)]);
        let (sid, _, msgs) = &p.sessions[0];
        let s = session_from(sid, msgs);
        assert_eq!(
            (s.time.created, s.time.updated, s.title.as_str()),
            (5, 9, "")
        );
    }

    #[test]
    fn errors_name_where() {
        let bad = format!("{}\n{{\"info\": 1", message("msg_1", "ses_a", 1));
        let e = parse(&bad).err().unwrap().to_string();
        assert!(e.starts_with("line 2: malformed JSON"), "{e}");
        let doc = json!({"info": {"id": "ses_a", "title": "", "time": {"created": 1, "updated": 1}},
                         "messages": [message("msg_1", "ses_other", 1)]});
        let e = parse(&doc.to_string()).err().unwrap().to_string();
        assert!(e.contains("messages[0]") && e.contains("ses_other"), "{e}");
    }
}
