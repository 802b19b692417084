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
//! value. Import writes `session.updated`, then one batch per message (message + parts).

use std::collections::HashMap;

use forge_core::model::{JsonMap, SessionTime};
use forge_core::store::MAX_PAGE_LIMIT;
use forge_core::{read_all, Engine, MessageWithParts, Session, SessionId, TenantId};
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

/// Imports `text` (either shape) into `engine`; `progress` is called after each
/// message with (messages written, messages in all).
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

async fn write_sessions(
    engine: &Engine,
    tenant: &TenantId,
    parsed: Parsed,
    total: usize,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Vec<ImportedSession>> {
    let mut written = 0;
    let mut done = Vec::new();
    for (sid, info, messages) in parsed.sessions {
        let at = format!("session {sid}");
        let put = |e| classify(at.clone(), "the session", e);
        let (scope, session_written) = match info {
            Some(info) => (engine.put_session(tenant, info).await.map_err(put)?, true),
            None => match engine
                .store
                .session(tenant, &sid)
                .await
                .map_err(|e| Error::store(format!("reading {at}"), e))?
            {
                Some(_) => (
                    engine
                        .scope(tenant, &sid)
                        .await
                        .map_err(|e| Error::store(format!("opening {at}"), e))?,
                    false,
                ),
                None => {
                    let s = session_from(&sid, &messages);
                    (engine.put_session(tenant, s).await.map_err(put)?, true)
                }
            },
        };
        let mut report = ImportedSession {
            id: sid.clone(),
            session_written,
            messages: 0,
            parts: 0,
        };
        for m in messages {
            let id = m.info.id.clone();
            let n = m.parts.len();
            engine
                .put_message(&scope, m.info, m.parts)
                .await
                .map_err(|e| {
                    classify(format!("message {id} of session {sid}"), "the message", e)
                })?;
            report.messages += 1;
            report.parts += n;
            written += 1;
            progress(written, total);
        }
        done.push(report);
    }
    Ok(done)
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
