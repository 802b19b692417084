//! Decoding stored rows: every row keeps its JSON next to the indexed columns, and the
//! JSON is the whole truth (ids included), so reading is parsing it — after checking it
//! against the row's `checksum` column.
//!
//! `checksum` holds the value's format version in its high 32 bits (1: JSON text) and
//! the crc32c of the JSON's UTF-8 bytes in its low 32 bits. Every write sets it; every
//! read verifies it, so a value damaged on disk or edited behind the store's back is
//! [`Error::Corrupted`] naming the row and the database, never returned changed.

use forge_core::{Error, Message, MessageWithParts, Part, Result, Session, SessionState};
use serde::de::DeserializeOwned;

/// Parses a stored JSON row, naming the row in the error.
pub(crate) fn from_json<T: DeserializeOwned>(
    json: &str,
    what: impl FnOnce() -> String,
) -> Result<T> {
    serde_json::from_str(json).map_err(|e| Error::codec(format!("{} does not decode", what()), e))
}

/// The format version of a row's value: JSON text.
pub(crate) const VALUE_FORMAT: i64 = 1;

/// The `checksum` column of a row whose JSON is `body`.
pub(crate) fn checksum(body: &str) -> i64 {
    (VALUE_FORMAT << 32) | i64::from(crc32c::crc32c(body.as_bytes()))
}

/// Where a row was read, for [`verify`]'s error.
pub(crate) struct Origin<'a> {
    /// The database (`SQLite database PATH`, `Postgres schema NAME`).
    pub place: &'a str,
    /// The table.
    pub table: &'a str,
    /// The row's tenant.
    pub tenant: &'a str,
    /// Whether a row without a checksum is accepted unverified (rows written before the
    /// column existed, where they could not be given one).
    pub unchecked_ok: bool,
    /// Whether the row's id column must be the `id` in its JSON.
    pub key_checked: bool,
}

/// Checks `body` against its row's `checksum` (`None`: SQL NULL); `key` names the row
/// (its id column, as stored).
///
/// # Errors
/// [`Error::Corrupted`] naming the row and the database: a missing checksum (unless
/// [`Origin::unchecked_ok`]), an unknown value format, or a checksum that does not match.
pub(crate) fn verify(body: &str, check: Option<i64>, key: &[u8], at: &Origin<'_>) -> Result<()> {
    let what = || {
        format!(
            "{} {} row {} of tenant {}",
            at.place,
            at.table,
            String::from_utf8_lossy(key),
            at.tenant
        )
    };
    let Some(check) = check else {
        if at.unchecked_ok {
            return Ok(());
        }
        return Err(Error::corrupted(
            what(),
            "has no checksum (written or edited outside forge-store?)",
        ));
    };
    let format = check >> 32;
    if format != VALUE_FORMAT {
        return Err(Error::corrupted(
            what(),
            format!("has value format {format}; this release knows format {VALUE_FORMAT}"),
        ));
    }
    let expected = check & 0xffff_ffff;
    let actual = i64::from(crc32c::crc32c(body.as_bytes()));
    if expected != actual {
        return Err(Error::corrupted(
            what(),
            format!(
                "fails its checksum (stored crc32c {expected:08x}, the value's {actual:08x}): \
                 the value was damaged or changed behind the store's back"
            ),
        ));
    }
    if at.key_checked && !names_key(body, key) {
        return Err(Error::corrupted(
            what(),
            "its value is of another id: the row's key was damaged or changed behind the \
             store's back",
        ));
    }
    Ok(())
}

/// Whether the JSON `body` (compact, as written) has `"id":<key>` in it. A nested
/// `"id"` of the same value would pass too: the check only ever errs towards accepting.
fn names_key(body: &str, key: &[u8]) -> bool {
    let Ok(key) = std::str::from_utf8(key) else {
        return false;
    };
    let Ok(quoted) = serde_json::to_string(key) else {
        return false;
    };
    let needle = format!("\"id\":{quoted}");
    body.contains(&needle)
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
