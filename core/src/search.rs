//! Full-text search over what was said: the text of text and reasoning parts, and a
//! tool call's name, input values and output or error.
//!
//! Every backend answers [`Store::search`] with the same
//! semantics, whatever its index:
//!
//! - A part's **document** is [`document`]: the text a search looks at. Other kinds of
//!   part (files, steps, patches, …) are not searched. Values stored once as a blob
//!   ([`crate::blob`]) are not searched; a document is cut at [`MAX_DOCUMENT_BYTES`].
//! - A query is a list of words ([`words`]: maximal runs of letters and digits,
//!   lowercased); a part is a hit when its document holds **every** word of the query
//!   as a whole word. Punctuation in the query separates words.
//! - Hits are ranked best first by the backend's own relevance score (BM25 for the
//!   scan and for the redb and Redis indexes, [`Bm25`]; FTS5's `bm25()` on SQLite;
//!   `ts_rank` on Postgres), ties broken by session, message and part id. Scores compare
//!   only within one answer.
//! - Each hit names its session, message and part and carries a [`snippet`] of the
//!   document around its first matching word.
//! - Per tenant: a search never sees another tenant's rows.
//!
//! The default [`scan`] reads the whole tenant (or session) and ranks in memory: it is
//! the reference the indexes are checked against, and what a backend without an index
//! does. Its cost grows with the tenant ([`Capabilities::search`](crate::Capabilities)
//! says which a store does).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::blob::BLOB_PREFIX;
use crate::error::{Error, Result};
use crate::id::{MessageId, PartId, SessionId};
use crate::model::{Part, PartBody, ToolState};
use crate::store::Store;
use crate::tenant::TenantId;

/// The longest document indexed or scanned, in bytes: text beyond it is not searched.
pub const MAX_DOCUMENT_BYTES: usize = 64 * 1024;
/// The longest word indexed, in bytes; longer runs (hashes, base64) are not words.
pub const MAX_WORD_BYTES: usize = 64;
/// Hits returned when the query asks for none.
pub const DEFAULT_SEARCH_LIMIT: usize = 20;
/// The most hits one search returns.
pub const MAX_SEARCH_LIMIT: usize = 200;
/// Characters of a snippet, at most (plus the `…` marks).
pub const SNIPPET_CHARS: usize = 160;

/// How a store answers [`Store::search`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum SearchKind {
    /// Reads every row of the tenant per query ([`scan`]).
    Scan,
    /// Keeps an index, written in the same transaction as the rows.
    Index,
    /// Searching was turned off for this database (`search=off`): no index is kept and
    /// a search fails with [`Error::Unsupported`].
    Off,
}

/// A search request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchQuery {
    /// The words to find (see [`words`]).
    pub text: String,
    /// At most this many hits (0: [`DEFAULT_SEARCH_LIMIT`]; capped at
    /// [`MAX_SEARCH_LIMIT`]).
    #[serde(default)]
    pub limit: usize,
    /// Only this session's parts.
    #[serde(default, rename = "sessionID", skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionId>,
}

impl SearchQuery {
    /// A query for `text` with the default limit over the whole tenant.
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            limit: 0,
            session: None,
        }
    }

    /// The query's distinct words, in order of first appearance.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when the text holds no word.
    pub fn words(&self) -> Result<Vec<String>> {
        let mut seen = Vec::new();
        for w in words(&self.text) {
            let w = w.into_owned();
            if !seen.contains(&w) {
                seen.push(w);
            }
        }
        if seen.is_empty() {
            return Err(Error::invalid(format!(
                "search query {:?} holds no word (letters or digits)",
                self.text
            )));
        }
        Ok(seen)
    }

    /// The limit after defaulting and capping.
    pub fn limit(&self) -> usize {
        match self.limit {
            0 => DEFAULT_SEARCH_LIMIT,
            n => n.min(MAX_SEARCH_LIMIT),
        }
    }
}

/// One hit: where the part is, how well it matched, and a piece of its text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchHit {
    /// The session.
    #[serde(rename = "sessionID")]
    pub session_id: SessionId,
    /// The message holding the part.
    #[serde(rename = "messageID")]
    pub message_id: MessageId,
    /// The part.
    #[serde(rename = "partID")]
    pub part_id: PartId,
    /// The part's `type` (`text`, `reasoning`, `tool`).
    #[serde(rename = "type")]
    pub kind: String,
    /// Relevance, higher is better; comparable only within one answer.
    pub score: f64,
    /// The document around the first matching word (see [`snippet`]).
    pub snippet: String,
    /// Byte ranges `[start, end)` of the matching words within `snippet`.
    pub highlights: Vec<[usize; 2]>,
}

impl SearchHit {
    /// A hit on `part` with `score`, its snippet made for `words` (`None` when the part
    /// has no document).
    pub fn of(part: &Part, score: f64, words: &[String]) -> Option<Self> {
        let doc = document(part)?;
        let (snippet, highlights) = snippet(&doc, words);
        Some(Self {
            session_id: part.session_id.clone(),
            message_id: part.message_id.clone(),
            part_id: part.id.clone(),
            kind: part.kind().to_owned(),
            score,
            snippet,
            highlights,
        })
    }
}

/// The text a search looks at in `part`, or `None` for a kind that is not searched:
/// a text or reasoning part's text; a tool call's name, the values of its input (not
/// the keys), and its output or error. NUL characters become spaces, a value stored as
/// a blob is left out, and the whole is cut at [`MAX_DOCUMENT_BYTES`] (on a character
/// boundary).
pub fn document(part: &Part) -> Option<Cow<'_, str>> {
    let doc: Cow<'_, str> = match &part.body {
        PartBody::Text(t) => Cow::Borrowed(t.text.as_str()),
        PartBody::Reasoning(r) => Cow::Borrowed(r.text.as_str()),
        PartBody::Tool(t) => {
            let mut doc = String::new();
            doc.push_str(&t.tool);
            let (input, result) = match &t.state {
                ToolState::Pending(p) => (&p.input, None),
                ToolState::Running(r) => (&r.input, None),
                ToolState::Completed(c) => (&c.input, Some(c.output.as_str())),
                ToolState::Error(e) => (&e.input, Some(e.error.as_str())),
            };
            push_values(&mut doc, input);
            if let Some(result) = result.filter(|r| !r.starts_with(BLOB_PREFIX)) {
                doc.push('\n');
                doc.push_str(result);
            }
            Cow::Owned(doc)
        }
        _ => return None,
    };
    if doc.starts_with(BLOB_PREFIX) {
        return None;
    }
    let doc = cut(doc, MAX_DOCUMENT_BYTES);
    Some(if doc.contains('\0') {
        Cow::Owned(doc.replace('\0', " "))
    } else {
        doc
    })
}

fn cut(doc: Cow<'_, str>, max: usize) -> Cow<'_, str> {
    if doc.len() <= max {
        return doc;
    }
    let mut end = max;
    while !doc.is_char_boundary(end) {
        end -= 1;
    }
    match doc {
        Cow::Borrowed(s) => Cow::Borrowed(&s[..end]),
        Cow::Owned(mut s) => {
            s.truncate(end);
            Cow::Owned(s)
        }
    }
}

/// Appends every scalar value of `v` (strings, numbers, booleans), each after a space.
fn push_values(out: &mut String, v: &Value) {
    if out.len() > MAX_DOCUMENT_BYTES {
        return;
    }
    match v {
        Value::Null => {}
        Value::String(s) => {
            if !s.starts_with(BLOB_PREFIX) {
                out.push(' ');
                out.push_str(s);
            }
        }
        Value::Bool(_) | Value::Number(_) => {
            out.push(' ');
            out.push_str(&v.to_string());
        }
        Value::Array(a) => a.iter().for_each(|v| push_values(out, v)),
        Value::Object(o) => o.values().for_each(|v| push_values(out, v)),
    }
}

/// The words of `text` with their byte ranges: maximal runs of alphanumeric characters
/// ([`char::is_alphanumeric`]), lowercased; runs longer than [`MAX_WORD_BYTES`] are
/// skipped.
pub fn word_spans(text: &str) -> impl Iterator<Item = (usize, usize, Cow<'_, str>)> + '_ {
    let mut chars = text.char_indices().peekable();
    std::iter::from_fn(move || loop {
        // Skip separators.
        let (start, _) = loop {
            let (i, c) = chars.next()?;
            if c.is_alphanumeric() {
                break (i, c);
            }
        };
        let mut end = text.len();
        while let Some(&(i, c)) = chars.peek() {
            if !c.is_alphanumeric() {
                end = i;
                break;
            }
            chars.next();
        }
        if end - start > MAX_WORD_BYTES {
            continue;
        }
        let w = &text[start..end];
        let w = if w.chars().any(char::is_uppercase) {
            Cow::Owned(w.to_lowercase())
        } else {
            Cow::Borrowed(w)
        };
        return Some((start, end, w));
    })
}

/// The words of `text` (see [`word_spans`]).
pub fn words(text: &str) -> impl Iterator<Item = Cow<'_, str>> + '_ {
    word_spans(text).map(|(_, _, w)| w)
}

/// A document's distinct words with how often each occurs, and its length in words:
/// what an inverted index stores for it.
pub fn term_frequencies(doc: &str) -> (BTreeMap<String, u32>, u32) {
    let mut terms: BTreeMap<String, u32> = BTreeMap::new();
    let mut len = 0u32;
    for w in words(doc) {
        len = len.saturating_add(1);
        match terms.get_mut(w.as_ref()) {
            Some(n) => *n = n.saturating_add(1),
            None => {
                terms.insert(w.into_owned(), 1);
            }
        }
    }
    (terms, len)
}

/// Okapi BM25 with `k1 = 1.2`, `b = 0.75`, over a collection of `docs` documents whose
/// lengths total `total_len` words.
#[derive(Clone, Copy, Debug)]
pub struct Bm25 {
    docs: f64,
    avg_len: f64,
}

impl Bm25 {
    const K1: f64 = 1.2;
    const B: f64 = 0.75;

    /// The collection's statistics.
    pub fn new(docs: u64, total_len: u64) -> Self {
        let docs = docs.max(1) as f64;
        Self {
            docs,
            avg_len: (total_len as f64 / docs).max(1.0),
        }
    }

    /// The score of one word occurring `tf` times in a document of `len` words, the
    /// word occurring in `df` documents.
    pub fn score(&self, tf: u32, df: u64, len: u32) -> f64 {
        let df = df as f64;
        let idf = ((self.docs - df + 0.5) / (df + 0.5) + 1.0).ln();
        let tf = f64::from(tf);
        let norm = 1.0 - Self::B + Self::B * f64::from(len) / self.avg_len;
        idf * tf * (Self::K1 + 1.0) / (tf + Self::K1 * norm)
    }
}

/// Sorts hits best first (score, then session, message and part id) and keeps `limit`.
pub fn rank(hits: &mut Vec<SearchHit>, limit: usize) {
    hits.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.session_id.cmp(&b.session_id))
            .then_with(|| a.message_id.cmp(&b.message_id))
            .then_with(|| a.part_id.cmp(&b.part_id))
    });
    hits.truncate(limit);
}

/// A piece of `doc` of at most [`SNIPPET_CHARS`] characters around its first word in
/// `query`, with `…` where it was cut, and the byte ranges of the query's words in it.
pub fn snippet(doc: &str, query: &[String]) -> (String, Vec<[usize; 2]>) {
    let is_hit = |w: &str| query.iter().any(|q| q == w);
    let first = word_spans(doc)
        .find(|(_, _, w)| is_hit(w))
        .map_or(0, |(s, _, _)| s);
    // Start about a quarter of the window before the match, at a character boundary.
    let lead = SNIPPET_CHARS / 4;
    let mut start = doc[..first]
        .char_indices()
        .rev()
        .nth(lead.saturating_sub(1))
        .map_or(0, |(i, _)| i);
    if start > 0 {
        // Begin at a word: skip the cut word's rest.
        if let Some(i) = doc[start..first].find(|c: char| !c.is_alphanumeric()) {
            start += i;
        }
    }
    let end = doc[start..]
        .char_indices()
        .nth(SNIPPET_CHARS)
        .map_or(doc.len(), |(i, _)| start + i);
    let body = &doc[start..end];
    let mut out = String::with_capacity(body.len() + 8);
    if start > 0 {
        out.push('…');
    }
    // Whitespace runs (newlines, indentation) read as one space.
    let mut map = Vec::with_capacity(body.len() + 1);
    let mut last_space = false;
    for (i, c) in body.char_indices() {
        map.push((i, out.len()));
        if c.is_whitespace() {
            if !last_space {
                out.push(' ');
            }
            last_space = true;
        } else {
            out.push(c);
            last_space = false;
        }
    }
    map.push((body.len(), out.len()));
    let at = |byte: usize| {
        map.binary_search_by_key(&byte, |&(b, _)| b)
            .map_or_else(|i| map[i.min(map.len() - 1)].1, |i| map[i].1)
    };
    let highlights = word_spans(body)
        .filter(|(s, e, w)| is_hit(w) && *e <= body.len() && *s < *e)
        .filter(|(_, e, _)| *e < body.len() || end == doc.len())
        .map(|(s, e, _)| [at(s), at(e)])
        .collect();
    if end < doc.len() {
        out.push('…');
    }
    (out, highlights)
}

/// Search by reading: every session of the tenant (or the one asked for) is read
/// through [`Store::messages`], every document matched and ranked by [`Bm25`] over the
/// documents read. The default of [`Store::search`]; its cost grows with what it reads.
///
/// # Errors
/// [`Error::InvalidInput`] for a query without words; the store's errors.
pub async fn scan<S: Store + ?Sized>(
    store: &S,
    tenant: &TenantId,
    query: &SearchQuery,
) -> Result<Vec<SearchHit>> {
    let words = query.words()?;
    let sessions = match &query.session {
        Some(s) => vec![s.clone()],
        None => {
            let mut all = Vec::new();
            let mut after = None;
            loop {
                let page = store
                    .sessions_after(tenant, after.as_ref(), crate::store::MAX_PAGE_LIMIT)
                    .await?;
                all.extend(page.sessions.into_iter().map(|s| s.info.id));
                match page.next {
                    Some(n) => after = Some(n),
                    None => break,
                }
            }
            all
        }
    };
    let mut docs = 0u64;
    let mut total_len = 0u64;
    let mut df: HashMap<&str, u64> = HashMap::new();
    let mut matched: Vec<(Part, Vec<u32>, u32)> = Vec::new();
    for session in &sessions {
        let mut cursor: Option<crate::store::Cursor> = None;
        loop {
            let page = store
                .messages(tenant, session, cursor.as_ref(), 200)
                .await?;
            for m in page.messages {
                for part in m.parts {
                    let Some(doc) = document(&part) else { continue };
                    let (terms, len) = term_frequencies(&doc);
                    docs += 1;
                    total_len += u64::from(len);
                    let tfs: Vec<u32> = words
                        .iter()
                        .map(|w| terms.get(w).copied().unwrap_or(0))
                        .collect();
                    for (w, &tf) in words.iter().zip(&tfs) {
                        if tf > 0 {
                            *df.entry(w.as_str()).or_default() += 1;
                        }
                    }
                    if tfs.iter().all(|&tf| tf > 0) {
                        drop(doc);
                        matched.push((part, tfs, len));
                    }
                }
            }
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
    }
    let bm25 = Bm25::new(docs, total_len);
    let mut hits: Vec<SearchHit> = matched
        .iter()
        .filter_map(|(part, tfs, len)| {
            let score = words
                .iter()
                .zip(tfs)
                .map(|(w, &tf)| bm25.score(tf, df.get(w.as_str()).copied().unwrap_or(1), *len))
                .sum();
            SearchHit::of(part, score, &words)
        })
        .collect();
    rank(&mut hits, query.limit());
    Ok(hits)
}

/// Whether `part`'s document holds every word of `words` (the match rule every backend
/// keeps; the conformance suite's model).
pub fn matches(part: &Part, words: &[String]) -> bool {
    document(part).is_some_and(|doc| {
        let (terms, _) = term_frequencies(&doc);
        words.iter().all(|w| terms.contains_key(w))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_lowercased_alphanumeric_runs() {
        let got: Vec<_> = words("Fix src/main.rs: E0308 — ÉTÉ_été snake_case").collect();
        assert_eq!(
            got,
            ["fix", "src", "main", "rs", "e0308", "été", "été", "snake", "case"]
        );
        let long = "x".repeat(MAX_WORD_BYTES + 1);
        assert_eq!(words(&format!("a {long} b")).count(), 2);
    }

    #[test]
    fn a_query_without_words_is_refused_by_name() {
        let err = SearchQuery::new(" -- ").words().unwrap_err();
        assert!(err.to_string().contains("no word"), "{err}");
        assert_eq!(SearchQuery::new("A a b").words().unwrap(), ["a", "b"]);
    }

    #[test]
    fn bm25_prefers_rare_words_and_short_documents() {
        let b = Bm25::new(100, 1000);
        assert!(b.score(1, 2, 10) > b.score(1, 50, 10));
        assert!(b.score(1, 2, 5) > b.score(1, 2, 50));
        assert!(b.score(3, 2, 10) > b.score(1, 2, 10));
    }

    #[test]
    fn a_snippet_shows_the_match_and_marks_it() {
        let doc = format!(
            "{} the Needle is here\n\n  and more {}",
            "a".repeat(300),
            "b ".repeat(200)
        );
        let (s, h) = snippet(&doc, &["needle".to_owned()]);
        assert!(s.starts_with('…') && s.ends_with('…'), "{s}");
        assert_eq!(h.len(), 1);
        assert_eq!(&s[h[0][0]..h[0][1]], "Needle");
        assert!(s.contains("is here and more"), "{s}");
        assert!(s.chars().count() <= SNIPPET_CHARS + 2);
        let (s, h) = snippet("needle at start", &["needle".to_owned()]);
        assert_eq!(s, "needle at start");
        assert_eq!(h, vec![[0, 6]]);
    }

    #[test]
    fn a_document_cut_stays_on_a_character_boundary() {
        let doc = "é".repeat(MAX_DOCUMENT_BYTES);
        let cut = cut(Cow::Borrowed(&doc), MAX_DOCUMENT_BYTES);
        assert!(cut.len() <= MAX_DOCUMENT_BYTES);
        assert!(cut.chars().all(|c| c == 'é'));
    }
}
