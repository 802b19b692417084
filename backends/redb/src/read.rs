//! The read path: every read runs in one redb read transaction (a consistent snapshot).
//!
//! Prefix scans start at the smallest key of the prefix and stop as soon as a key's
//! tenant/session/message element differs, so they never depend on a "maximal" id.

use forge_core::store::clamp_limit;
use forge_core::{
    Cursor, Message, MessageWithParts, OpenItems, Page, Part, Result, SessionId, SessionPage,
    SessionState, TenantId,
};
use redb::{ReadTransaction, ReadableTable};

use crate::error::{inconsistent, map};
use crate::schema::{
    decode, from_json, successor, JsonRow, PartKey, SessionRow, MESSAGES, OPEN_MESSAGES,
    OPEN_PARTS, PARTS, SESSIONS,
};

fn session_state(bytes: &[u8], t: &str, s: &str) -> Result<SessionState> {
    let what = || format!("session row {t}/{s}");
    let row: SessionRow = decode(bytes, what)?;
    Ok(SessionState {
        info: from_json(&row.json, what)?,
        seq: row.seq,
    })
}

fn message_info(bytes: &[u8], t: &str, s: &str, m: &str) -> Result<Message> {
    let what = || format!("message row {t}/{s}/{m}");
    let row: JsonRow = decode(bytes, what)?;
    from_json(&row.json, what)
}

fn part(bytes: &[u8], t: &str, s: &str, m: &str, p: &str) -> Result<Part> {
    let what = || format!("part row {t}/{s}/{m}/{p}");
    let row: JsonRow = decode(bytes, what)?;
    from_json(&row.json, what)
}

/// One session of a tenant.
pub(crate) fn session(
    txn: &ReadTransaction,
    tenant: &TenantId,
    id: &SessionId,
) -> Result<Option<SessionState>> {
    let (t, s) = (tenant.as_str(), id.as_str());
    let sessions = txn.open_table(SESSIONS).map_err(map)?;
    let Some(value) = sessions.get((t, s)).map_err(map)? else {
        return Ok(None);
    };
    session_state(value.value(), t, s).map(Some)
}

/// All sessions of a tenant, in id order.
pub(crate) fn sessions(txn: &ReadTransaction, tenant: &TenantId) -> Result<Vec<SessionState>> {
    let t = tenant.as_str();
    let sessions = txn.open_table(SESSIONS).map_err(map)?;
    let mut out = Vec::new();
    for entry in sessions.range((t, "")..).map_err(map)? {
        let (key, value) = entry.map_err(map)?;
        let (kt, ks) = key.value();
        if kt != t {
            break;
        }
        out.push(session_state(value.value(), kt, ks)?);
    }
    Ok(out)
}

/// A page of a tenant's sessions after `after`, in id order.
pub(crate) fn sessions_after(
    txn: &ReadTransaction,
    tenant: &TenantId,
    after: Option<&SessionId>,
    limit: usize,
) -> Result<SessionPage> {
    use std::ops::Bound;
    let limit = clamp_limit(limit);
    let t = tenant.as_str();
    let sessions = txn.open_table(SESSIONS).map_err(map)?;
    let from = match after {
        Some(a) => Bound::Excluded((t, a.as_str())),
        None => Bound::Included((t, "")),
    };
    let mut out = Vec::new();
    let mut more = false;
    for entry in sessions
        .range::<(&str, &str)>((from, Bound::Unbounded))
        .map_err(map)?
    {
        let (key, value) = entry.map_err(map)?;
        let (kt, ks) = key.value();
        if kt != t {
            break;
        }
        if out.len() == limit {
            more = true;
            break;
        }
        out.push(session_state(value.value(), kt, ks)?);
    }
    let next = more
        .then(|| out.last().map(|s: &SessionState| s.info.id.clone()))
        .flatten();
    Ok(SessionPage {
        sessions: out,
        next,
    })
}

/// The parts of one message, in part-id order.
fn parts_of(
    parts: &impl ReadableTable<PartKey, &'static [u8]>,
    t: &str,
    s: &str,
    m: &str,
) -> Result<Vec<Part>> {
    let mut out = Vec::new();
    for entry in parts.range((t, s, m, "")..).map_err(map)? {
        let (key, value) = entry.map_err(map)?;
        let (kt, ks, km, kp) = key.value();
        if kt != t || ks != s || km != m {
            break;
        }
        out.push(part(value.value(), t, s, m, kp)?);
    }
    Ok(out)
}

/// One message with its parts.
pub(crate) fn message(
    txn: &ReadTransaction,
    tenant: &TenantId,
    session: &SessionId,
    id: &forge_core::MessageId,
) -> Result<Option<MessageWithParts>> {
    let (t, s, m) = (tenant.as_str(), session.as_str(), id.as_str());
    let messages = txn.open_table(MESSAGES).map_err(map)?;
    let Some(value) = messages.get((t, s, m)).map_err(map)? else {
        return Ok(None);
    };
    let info = message_info(value.value(), t, s, m)?;
    let parts = txn.open_table(PARTS).map_err(map)?;
    Ok(Some(MessageWithParts {
        info,
        parts: parts_of(&parts, t, s, m)?,
    }))
}

/// A page of a session's messages, newest page first: a reverse scan from just below
/// the cursor (or from the end of the session's key range) down to the session's first
/// key, taking `limit + 1` keys to learn whether an older page exists.
pub(crate) fn messages(
    txn: &ReadTransaction,
    tenant: &TenantId,
    session: &SessionId,
    before: Option<&Cursor>,
    limit: usize,
) -> Result<Page> {
    let limit = clamp_limit(limit);
    let (t, s) = (tenant.as_str(), session.as_str());
    let messages = txn.open_table(MESSAGES).map_err(map)?;
    let end_of_session = successor(s);
    let hi = match before {
        Some(c) => (t, s, c.message_id().as_str()),
        None => (t, end_of_session.as_str(), ""),
    };
    let mut newest_first = Vec::with_capacity(limit.min(64));
    let mut more = false;
    for entry in messages.range((t, s, "")..hi).map_err(map)?.rev() {
        let (key, value) = entry.map_err(map)?;
        let (kt, ks, km) = key.value();
        if kt != t || ks != s {
            break;
        }
        if newest_first.len() == limit {
            more = true;
            break;
        }
        newest_first.push(message_info(value.value(), t, s, km)?);
    }
    let parts = txn.open_table(PARTS).map_err(map)?;
    let messages = newest_first
        .into_iter()
        .rev()
        .map(|info| {
            let parts = parts_of(&parts, t, s, info.id.as_str())?;
            Ok(MessageWithParts { info, parts })
        })
        .collect::<Result<Vec<_>>>()?;
    let next = if more {
        messages.first().map(|m| Cursor::before(m.info.id.clone()))
    } else {
        None
    };
    Ok(Page { messages, next })
}

/// The open messages and parts of a tenant, or of one of its sessions, through the
/// `open_*` index tables: the cost follows what is open, not the history.
pub(crate) fn open_items(
    txn: &ReadTransaction,
    tenant: &TenantId,
    session: Option<&SessionId>,
) -> Result<OpenItems> {
    let t = tenant.as_str();
    let s = session.map_or("", SessionId::as_str);
    let in_scope = |kt: &str, ks: &str| kt == t && session.is_none_or(|_| ks == s);
    let mut out = OpenItems::default();

    let index = txn.open_table(OPEN_MESSAGES).map_err(map)?;
    let messages = txn.open_table(MESSAGES).map_err(map)?;
    for entry in index.range((t, s, "")..).map_err(map)? {
        let key = entry.map_err(map)?.0;
        let (kt, ks, km) = key.value();
        if !in_scope(kt, ks) {
            break;
        }
        let value = messages.get((kt, ks, km)).map_err(map)?.ok_or_else(|| {
            inconsistent(
                format_args!("open-index entry {kt}/{ks}/{km}"),
                "the open message has no row",
            )
        })?;
        out.messages.push(message_info(value.value(), kt, ks, km)?);
    }

    let index = txn.open_table(OPEN_PARTS).map_err(map)?;
    let parts = txn.open_table(PARTS).map_err(map)?;
    for entry in index.range((t, s, "", "")..).map_err(map)? {
        let key = entry.map_err(map)?.0;
        let (kt, ks, km, kp) = key.value();
        if !in_scope(kt, ks) {
            break;
        }
        let value = parts.get((kt, ks, km, kp)).map_err(map)?.ok_or_else(|| {
            inconsistent(
                format_args!("open-index entry {kt}/{ks}/{km}/{kp}"),
                "the open part has no row",
            )
        })?;
        out.parts.push(part(value.value(), kt, ks, km, kp)?);
    }
    Ok(out)
}
