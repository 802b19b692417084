//! The on-disk layout: table definitions, row types and the schema version.
//!
//! Every key starts with the tenant, so a tenant's rows are one contiguous key range and
//! no read can reach another tenant's rows without naming it. Keys compare element by
//! element, each `&str` by its bytes, the same order as the ids' `Ord`, so key order is
//! id order and ids that sort in creation order give rows in creation order.
//!
//! | table | key | value |
//! |---|---|---|
//! | `meta` | `&str` name | `u64` (`schema_version`) |
//! | `sessions` | (tenant, session) | [`SessionRow`] |
//! | `messages` | (tenant, session, message) | [`JsonRow`] of the message |
//! | `parts` | (tenant, session, message, part) | [`JsonRow`] of the part |
//! | `open_messages` | (tenant, session, message) | `()` |
//! | `open_parts` | (tenant, session, message, part) | `()` |
//! | `part_messages` | (tenant, session, part, message) | `()` |
//! | `fences` | (tenant, session) | [`FenceRow`] |
//! | `blobs` | (tenant, SHA-256 hex) | codec-encoded [`BlobRow`]: a large value stored once |
//! | `blob_touched` | (tenant, SHA-256 hex) | `i64`: when the blob was last written or refreshed |
//! | `search_docs` | (tenant, session, part) | codec-encoded [`DocRow`]: the part's document number and terms |
//! | `search_refs` | (tenant, document number) | (session, part) |
//! | `search_postings` | (tenant, word, first document number) | a block of postings: (document number, term frequency, document length) each |
//! | `search_df` | (tenant, word) | `u64`: documents holding the word |
//! | `search_stats` | tenant | (`u64` documents, `u64` total length, `u32` sessions numbered) |
//! | `search_sessions` | (tenant, session) | (`u32` session number, `u32` documents numbered) |
//!
//! The two `open_*` tables index exactly the rows for which `Message::is_open` /
//! `Part::is_open` hold; `part_messages` indexes every part row by its id within the
//! session, so an upsert finds the message that holds the part (a part id is unique
//! within its session: an upsert naming another message moves it). Every upsert and
//! remove maintains them in the same transaction.
//!
//! Version 2 added `part_messages`; opening a version 1 file builds it. Version 3 added
//! the write-ahead journal (`<file>-journal`, whose position `meta` records): a release
//! that does not know the journal would ignore batches still only journaled, so it must
//! refuse the file. Version 4 added `fences`, the sessions' fence records
//! ([`forge_core::fence`]), and the journal operation that writes one: a release that
//! does not know them would let a fenced-off writer's batches land, and would refuse a
//! journal holding a claim. Opening a version 1, 2 or 3 file upgrades it in place (a
//! file without `fences` has no claims: every session is unclaimed).
//!
//! Version 5 added `blobs` and `blob_touched` ([`forge_core::blob`]): rows may hold a
//! reference to a blob in place of a large value, which a release that does not know
//! blobs would return as the value, so it must refuse the file. Opening a version 4 file
//! creates the two empty tables.
//!
//! Version 6 added the search index (the `search_*` tables, see [`crate::search`]),
//! written in the same transaction as the part rows it indexes: a release that does not
//! know it would leave it stale, so it must refuse the file. `meta` records under
//! `search_index` whether the index is kept (1) or absent (0, `search=off`); opening a
//! version 5 file creates the empty tables with `search_index` 0, and opening with
//! `search=on` then builds the index from the part rows.
//!
//! A fence record is apart from the session's rows: it may exist before its session,
//! and removing the session leaves it, so epochs never go back.

use forge_core::{codec, Error, Result};
use redb::TableDefinition;

/// The schema version this release writes and reads.
pub(crate) const SCHEMA_VERSION: u64 = 6;

/// Key of the schema version in [`META`].
pub(crate) const SCHEMA_VERSION_KEY: &str = "schema_version";
/// Key in [`META`] of the journal generation in force (see the `journal` module).
pub(crate) const JOURNAL_GENERATION_KEY: &str = "journal_generation";
/// Key in [`META`] of where the journal records the database holds end: set with every
/// journaled batch in its own transaction, so recovery replays exactly the records after
/// it, whatever made the database durable (a checkpoint, a clean close, redb's own
/// flush on drop).
pub(crate) const JOURNAL_APPLIED_KEY: &str = "journal_applied";

/// Key in [`META`] of the journal file's length at the last checkpoint: the file never
/// shrinks, so a shorter journal was cut (see the `journal` module).
pub(crate) const JOURNAL_SIZE_KEY: &str = "journal_size";

/// Key in [`META`] of the search index's state: 1 when the `search_*` tables index every
/// part row, 0 (or absent) when they are empty and unmaintained.
pub(crate) const SEARCH_INDEX_KEY: &str = "search_index";

/// Key of a session.
pub(crate) type SessionKey = (&'static str, &'static str);
/// Key of a message.
pub(crate) type MessageKey = (&'static str, &'static str, &'static str);
/// Key of a part.
pub(crate) type PartKey = (&'static str, &'static str, &'static str, &'static str);

/// File metadata.
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// Sessions: codec-encoded [`SessionRow`].
pub(crate) const SESSIONS: TableDefinition<SessionKey, &[u8]> = TableDefinition::new("sessions");
/// Messages: codec-encoded [`JsonRow`].
pub(crate) const MESSAGES: TableDefinition<MessageKey, &[u8]> = TableDefinition::new("messages");
/// Parts: codec-encoded [`JsonRow`].
pub(crate) const PARTS: TableDefinition<PartKey, &[u8]> = TableDefinition::new("parts");
/// Assistant messages without `time.completed`.
pub(crate) const OPEN_MESSAGES: TableDefinition<MessageKey, ()> =
    TableDefinition::new("open_messages");
/// Open text/reasoning parts and pending/running tools.
pub(crate) const OPEN_PARTS: TableDefinition<PartKey, ()> = TableDefinition::new("open_parts");
/// Every part row by (tenant, session, part, message): where a part id lives.
pub(crate) const PART_MESSAGES: TableDefinition<PartKey, ()> =
    TableDefinition::new("part_messages");
/// Fence records by (tenant, session): codec-encoded [`FenceRow`].
pub(crate) const FENCES: TableDefinition<SessionKey, &[u8]> = TableDefinition::new("fences");

/// Large values stored once: codec-encoded [`BlobRow`].
pub(crate) const BLOBS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("blobs");
/// When each blob was last written or refreshed, Unix ms (apart from the value, so a
/// refresh rewrites 8 bytes, not the value).
pub(crate) const BLOB_TOUCHED: TableDefinition<(&str, &str), i64> =
    TableDefinition::new("blob_touched");

/// The search index's documents by part: codec-encoded [`DocRow`].
pub(crate) const SEARCH_DOCS: TableDefinition<(&str, &str, &str), &[u8]> =
    TableDefinition::new("search_docs");
/// Where each document number points: (session, part).
pub(crate) const SEARCH_REFS: TableDefinition<(&str, u64), (&str, &str)> =
    TableDefinition::new("search_refs");
/// Postings by (tenant, word, first document number): a block of up to 128 postings of
/// the word, each (document number, term frequency, document length).
pub(crate) const SEARCH_POSTINGS: TableDefinition<(&str, &str, u64), &[u8]> =
    TableDefinition::new("search_postings");
/// Document frequency by (tenant, word): how many documents hold the word.
pub(crate) const SEARCH_DF: TableDefinition<(&str, &str), u64> = TableDefinition::new("search_df");
/// Per tenant: (documents, their total length in words, sessions numbered so far).
pub(crate) const SEARCH_STATS: TableDefinition<&str, (u64, u64, u32)> =
    TableDefinition::new("search_stats");
/// Per session: (its number, documents numbered in it so far).
pub(crate) const SEARCH_SESSIONS: TableDefinition<SessionKey, (u32, u32)> =
    TableDefinition::new("search_sessions");

/// A searched part's entry in the index: its document number and its terms (what its
/// postings are, so that an overwrite or a removal finds them).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(crate) struct DocRow {
    /// `session number << 32 | number within the session`.
    pub(crate) docno: u64,
    /// The document's terms.
    pub(crate) terms: crate::search::Terms,
}

/// A blob's value.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(crate) struct BlobRow {
    /// The value.
    pub(crate) value: String,
}

/// A session row: the session's JSON and the highest `seq` applied to it.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(crate) struct SessionRow {
    /// Highest `seq` of any event applied to the session.
    pub(crate) seq: u64,
    /// The session in its JSON shape (unknown fields included).
    pub(crate) json: String,
}

/// A message or part row: its JSON text. JSON-valued fields (tool input, metadata,
/// unknown fields) cannot go through bincode directly, so the whole row is JSON text
/// inside the versioned binary value.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(crate) struct JsonRow {
    /// The message or part in its JSON shape.
    pub(crate) json: String,
}

/// A session's fence record ([`forge_core::Claim`]).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(crate) struct FenceRow {
    /// The current epoch (1 for the first claim).
    pub(crate) epoch: u64,
    /// Who holds it.
    pub(crate) holder: String,
    /// Unix ms until which the lease runs; 0 once released.
    pub(crate) expires_ms: i64,
}

impl From<&forge_core::Claim> for FenceRow {
    fn from(c: &forge_core::Claim) -> Self {
        Self {
            epoch: c.epoch,
            holder: c.holder.clone(),
            expires_ms: c.expires_ms,
        }
    }
}

impl From<FenceRow> for forge_core::Claim {
    fn from(r: FenceRow) -> Self {
        Self {
            epoch: r.epoch,
            holder: r.holder,
            expires_ms: r.expires_ms,
        }
    }
}

/// The smallest string greater than every string that equals `s`: `s` followed by NUL.
///
/// Strings compare by bytes, so any `x > s` either extends `s` (and then `x >= s + "\0"`)
/// or differs from it at a byte where it is larger (and then `x > s + "\0"`). A tuple key
/// `(…, s, "")` built from it is therefore the exact exclusive upper bound of all keys
/// whose element equals `s` — not a guessed "maximal" sentinel.
pub(crate) fn successor(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 1);
    out.push_str(s);
    out.push('\0');
    out
}

/// Decodes a stored value, naming the row in the error and keeping the source.
pub(crate) fn decode<T: bincode::Decode<()>>(bytes: &[u8], what: impl Fn() -> String) -> Result<T> {
    codec::decode(bytes).map_err(|e| context(e, what))
}

/// Parses a row's JSON text, naming the row in the error and keeping the source.
pub(crate) fn from_json<T: serde::de::DeserializeOwned>(
    json: &str,
    what: impl Fn() -> String,
) -> Result<T> {
    serde_json::from_str(json).map_err(|e| Error::codec(format!("{}: JSON", what()), e))
}

fn context(err: Error, what: impl Fn() -> String) -> Error {
    match err {
        Error::Codec { message, source } => Error::Codec {
            message: format!("{}: {message}", what()),
            source,
        },
        Error::Corrupted {
            message, source, ..
        } => Error::Corrupted {
            at: what(),
            message,
            source,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn successor_bounds_exactly_the_strings_equal_to_it() {
        let s = "ses_1";
        let succ = successor(s);
        assert!(s < succ.as_str());
        for x in ["ses_1", "ses_0", "ses_", ""] {
            assert!(x < succ.as_str(), "{x}");
        }
        for x in ["ses_1\0", "ses_10", "ses_1a", "ses_2", "ses_1\u{10FFFF}"] {
            assert!(x >= succ.as_str(), "{x:?}");
        }
    }

    #[test]
    fn decode_errors_name_the_row() {
        let err = decode::<JsonRow>(&[9, 1, 2], || "message t/s/m".into()).unwrap_err();
        assert!(matches!(err, Error::Codec { .. }));
        let text = err.to_string();
        assert!(
            text.contains("message t/s/m") && text.contains("format version 9"),
            "{text}"
        );
    }
}
