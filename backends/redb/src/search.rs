//! The search index ([`forge_core::search`]): an inverted index in six tables, written
//! by [`crate::write::apply`] in the transaction that writes the part rows it indexes.
//!
//! Each part whose [`document`] is `Some` is one document. It gets a document number,
//! `session number << 32 | number within the session`, so that a posting names its
//! document in a few bytes (where two ids would take 60) and a session's postings of a
//! word are one range of numbers. Numbers are never reused while their session lives; a
//! session deleted and written again is numbered anew.
//!
//! - `search_docs` (tenant, session, part) → [`DocRow`]: the number and the document's
//!   [`Terms`] (its distinct words with their frequencies, and its length), so that an
//!   overwrite changes exactly the postings that differ and a removal finds them all.
//! - `search_refs` (tenant, number) → (session, part): where a hit is. The message is
//!   looked up in `part_messages` when a hit is read, so a part that moves to another
//!   message of its session changes nothing in the index.
//! - `search_postings` (tenant, word, first number) → a block of up to 128 of the word's
//!   postings, each (number, term frequency, document length) ([`postings`]): a query
//!   decodes a word's postings in number order and scores a candidate from them alone.
//! - `search_df` (tenant, word) → documents holding the word, and `search_stats`
//!   tenant → (documents, total length, sessions numbered): BM25's statistics, and the
//!   rarest word a query starts from.
//! - `search_sessions` (tenant, session) → (session number, documents numbered).
//!
//! The index is exact: after every transaction it holds one document per part row with a
//! document, as [`document`] reads the row now. `meta`'s `search_index` says whether the
//! tables are kept at all (`search=off` leaves them empty).

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

use forge_core::search::{document, words};
use forge_core::{Error, Part, Result};
use redb::{ReadTransaction, ReadableTable, Table, WriteTransaction};

use crate::error::map;
use crate::schema::{
    decode, from_json, successor, DocRow, JsonRow, META, PARTS, SEARCH_DF, SEARCH_DOCS,
    SEARCH_INDEX_KEY, SEARCH_POSTINGS, SEARCH_REFS, SEARCH_SESSIONS, SEARCH_STATS,
};

mod postings;
mod query;

use postings::Posting;
pub(crate) use query::search;

/// A document's distinct words, each with how often it occurs, and its length in words
/// ([`forge_core::search::term_frequencies`] in a compact form: one string, no
/// allocation per word).
#[derive(Debug, Clone, Default, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(crate) struct Terms {
    /// The distinct words in byte order, separated by single spaces (a word never holds
    /// one).
    words: String,
    /// The frequency of each word of `words`, in the same order.
    tfs: Vec<u32>,
    /// The document's length in words.
    len: u32,
}

impl Terms {
    /// The terms of `doc`.
    pub(crate) fn of(doc: &str) -> Self {
        let mut counts: HashMap<Cow<'_, str>, u32> = HashMap::new();
        let mut len = 0u32;
        for w in words(doc) {
            len = len.saturating_add(1);
            let n = counts.entry(w).or_insert(0);
            *n = n.saturating_add(1);
        }
        let mut sorted: Vec<(Cow<'_, str>, u32)> = counts.into_iter().collect();
        sorted.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut out = Self {
            words: String::with_capacity(sorted.iter().map(|(w, _)| w.len() + 1).sum()),
            tfs: Vec::with_capacity(sorted.len()),
            len,
        };
        for (w, tf) in sorted {
            if !out.words.is_empty() {
                out.words.push(' ');
            }
            out.words.push_str(&w);
            out.tfs.push(tf);
        }
        out
    }

    /// The terms of `part`'s document, `None` when it has none.
    pub(crate) fn of_part(part: &Part) -> Option<Self> {
        document(part).map(|doc| Self::of(&doc))
    }

    /// The terms of the part row `bytes` (a codec-encoded [`JsonRow`]).
    ///
    /// # Errors
    /// [`Error::Codec`] naming the row when it does not decode.
    pub(crate) fn of_row(bytes: &[u8], what: impl Fn() -> String) -> Result<Option<Self>> {
        let row: JsonRow = decode(bytes, &what)?;
        let part: Part = from_json(&row.json, &what)?;
        Ok(Self::of_part(&part))
    }

    /// The words with their frequencies, in byte order.
    fn iter(&self) -> impl Iterator<Item = (&str, u32)> {
        let words = (!self.words.is_empty()).then(|| self.words.split(' '));
        words.into_iter().flatten().zip(self.tfs.iter().copied())
    }

    /// Whether as many frequencies as words were read back.
    fn is_whole(&self) -> bool {
        let words = if self.words.is_empty() {
            0
        } else {
            self.words.split(' ').count()
        };
        words == self.tfs.len()
    }
}

/// A document number: the session's number in the high half, the document's number
/// within the session in the low half.
fn docno(session: u32, n: u32) -> u64 {
    (u64::from(session) << 32) | u64::from(n)
}

/// The index tables of one write transaction.
pub(crate) struct Index<'txn> {
    docs: Table<'txn, (&'static str, &'static str, &'static str), &'static [u8]>,
    refs: Table<'txn, (&'static str, u64), (&'static str, &'static str)>,
    postings: Table<'txn, (&'static str, &'static str, u64), &'static [u8]>,
    df: Table<'txn, (&'static str, &'static str), u64>,
    stats: Table<'txn, &'static str, (u64, u64, u32)>,
    sessions: Table<'txn, (&'static str, &'static str), (u32, u32)>,
}

impl<'txn> Index<'txn> {
    /// Opens (or creates) the index tables in `txn`.
    ///
    /// # Errors
    /// [`Error::Backend`] from redb.
    pub(crate) fn open(txn: &'txn WriteTransaction) -> Result<Self> {
        Ok(Self {
            docs: txn.open_table(SEARCH_DOCS).map_err(map)?,
            refs: txn.open_table(SEARCH_REFS).map_err(map)?,
            postings: txn.open_table(SEARCH_POSTINGS).map_err(map)?,
            df: txn.open_table(SEARCH_DF).map_err(map)?,
            stats: txn.open_table(SEARCH_STATS).map_err(map)?,
            sessions: txn.open_table(SEARCH_SESSIONS).map_err(map)?,
        })
    }

    /// Indexes part `p` of session `sn` with `terms` (`None`: the part has no document),
    /// replacing what the index held for it: only the postings that differ are written.
    ///
    /// # Errors
    /// [`Error::Codec`] for an index row that does not decode; [`Error::Backend`] from
    /// redb.
    pub(crate) fn put(&mut self, tn: &str, sn: &str, p: &str, terms: Option<Terms>) -> Result<()> {
        let old = self.doc(tn, sn, p)?;
        match (old, terms) {
            (None, None) => Ok(()),
            (Some(old), None) => {
                self.docs.remove((tn, sn, p)).map_err(map)?;
                self.unindex(tn, &old)
            }
            (Some(old), Some(new)) if old.terms == new => Ok(()),
            (Some(old), Some(new)) => {
                self.replace(tn, old.docno, &old.terms, &new)?;
                let delta = i64::from(new.len) - i64::from(old.terms.len);
                self.bump_stats(tn, 0, delta)?;
                self.put_doc(
                    tn,
                    sn,
                    p,
                    &DocRow {
                        docno: old.docno,
                        terms: new,
                    },
                )
            }
            (None, Some(new)) => {
                let docno = self.number(tn, sn)?;
                self.refs.insert((tn, docno), (sn, p)).map_err(map)?;
                for (w, tf) in new.iter() {
                    self.post(tn, w, docno, tf, new.len)?;
                    add_df(&mut self.df, tn, w, 1)?;
                }
                self.bump_stats(tn, 1, i64::from(new.len))?;
                self.put_doc(tn, sn, p, &DocRow { docno, terms: new })
            }
        }
    }

    /// Removes part `p` of session `sn` from the index, if it is there.
    ///
    /// # Errors
    /// As [`Index::put`].
    pub(crate) fn remove(&mut self, tn: &str, sn: &str, p: &str) -> Result<()> {
        let row = match self.docs.remove((tn, sn, p)).map_err(map)? {
            Some(v) => doc_row(v.value(), tn, sn, p)?,
            None => return Ok(()),
        };
        self.unindex(tn, &row)
    }

    /// Removes every document of session `sn`, and its numbering. Its documents' numbers
    /// are one range (the session's number in their high half), so each word it used
    /// loses that range of postings at once ([`postings::remove_range`]).
    ///
    /// # Errors
    /// As [`Index::put`].
    pub(crate) fn remove_session(&mut self, tn: &str, sn: &str) -> Result<()> {
        let hi = successor(sn);
        let mut rows = Vec::new();
        for entry in self
            .docs
            .extract_from_if((tn, sn, "")..(tn, hi.as_str(), ""), |_, _| true)
            .map_err(map)?
        {
            let (k, v) = entry.map_err(map)?;
            rows.push(doc_row(v.value(), tn, sn, k.value().2)?);
        }
        let numbered = self
            .sessions
            .remove((tn, sn))
            .map_err(map)?
            .map(|v| v.value().0);
        let Some(session) =
            numbered.filter(|&n| rows.iter().all(|r| r.docno >> 32 == u64::from(n)))
        else {
            // Not numbered as one session (a damaged index): one document at a time.
            for row in &rows {
                self.unindex(tn, row)?;
            }
            return Ok(());
        };
        // In word order, so the same deletion writes the same pages.
        let mut words: BTreeMap<&str, i64> = BTreeMap::new();
        let mut len = 0i64;
        for row in &rows {
            self.refs.remove((tn, row.docno)).map_err(map)?;
            len += i64::from(row.terms.len);
            for (w, _) in row.terms.iter() {
                *words.entry(w).or_default() += 1;
            }
        }
        let (lo, hi) = (docno(session, 0), docno(session, u32::MAX));
        for (w, n) in words {
            postings::remove_range(&mut self.postings, tn, w, lo, hi)?;
            add_df(&mut self.df, tn, w, -n)?;
        }
        let count = i64::try_from(rows.len()).unwrap_or(i64::MAX);
        self.bump_stats(tn, -count, -len)
    }

    /// The document row of part `p` of session `sn`.
    fn doc(&self, tn: &str, sn: &str, p: &str) -> Result<Option<DocRow>> {
        match self.docs.get((tn, sn, p)).map_err(map)? {
            Some(v) => doc_row(v.value(), tn, sn, p).map(Some),
            None => Ok(None),
        }
    }

    fn put_doc(&mut self, tn: &str, sn: &str, p: &str, row: &DocRow) -> Result<()> {
        let bytes = forge_core::codec::encode(row)?;
        self.docs
            .insert((tn, sn, p), bytes.as_slice())
            .map_err(map)?;
        Ok(())
    }

    /// Removes the postings, reference and statistics of a document whose row is gone.
    fn unindex(&mut self, tn: &str, row: &DocRow) -> Result<()> {
        for (w, _) in row.terms.iter() {
            postings::remove(&mut self.postings, tn, w, row.docno)?;
            add_df(&mut self.df, tn, w, -1)?;
        }
        self.refs.remove((tn, row.docno)).map_err(map)?;
        self.bump_stats(tn, -1, -i64::from(row.terms.len))
    }

    /// Rewrites document `docno`'s postings from `old` to `new`: a word gone loses its
    /// posting, a new word gains one, and a kept word's posting is written again only
    /// when its frequency or the document's length changed.
    fn replace(&mut self, tn: &str, docno: u64, old: &Terms, new: &Terms) -> Result<()> {
        let same_len = old.len == new.len;
        let mut o = old.iter().peekable();
        let mut n = new.iter().peekable();
        loop {
            let order = match (o.peek(), n.peek()) {
                (None, None) => return Ok(()),
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (Some((ow, _)), Some((nw, _))) => ow.cmp(nw),
            };
            match order {
                Ordering::Less => {
                    let Some((w, _)) = o.next() else { continue };
                    postings::remove(&mut self.postings, tn, w, docno)?;
                    add_df(&mut self.df, tn, w, -1)?;
                }
                Ordering::Greater => {
                    let Some((w, tf)) = n.next() else { continue };
                    self.post(tn, w, docno, tf, new.len)?;
                    add_df(&mut self.df, tn, w, 1)?;
                }
                Ordering::Equal => {
                    let (Some((_, old_tf)), Some((w, tf))) = (o.next(), n.next()) else {
                        continue;
                    };
                    if !(same_len && old_tf == tf) {
                        self.post(tn, w, docno, tf, new.len)?;
                    }
                }
            }
        }
    }

    fn post(&mut self, tn: &str, w: &str, doc: u64, tf: u32, len: u32) -> Result<()> {
        postings::put(&mut self.postings, tn, w, Posting { doc, tf, len })
    }

    /// A new document number in session `sn` (numbering the session when it has none).
    fn number(&mut self, tn: &str, sn: &str) -> Result<u64> {
        let current = self.sessions.get((tn, sn)).map_err(map)?.map(|v| v.value());
        let (session, next) = match current {
            Some(numbered) => numbered,
            None => {
                let (docs, total, sessions) = self.stats(tn)?;
                let next = sessions.checked_add(1).ok_or_else(|| {
                    Error::Unsupported(format!(
                        "tenant {tn} has numbered {sessions} sessions in its search index, \
                         the most it can; rebuild the index (search=off, then on)"
                    ))
                })?;
                self.stats.insert(tn, (docs, total, next)).map_err(map)?;
                (sessions, 0)
            }
        };
        let after = next.checked_add(1).ok_or_else(|| {
            Error::Unsupported(format!(
                "session {tn}/{sn} has numbered {next} documents in the search index, the \
                 most it can"
            ))
        })?;
        self.sessions
            .insert((tn, sn), (session, after))
            .map_err(map)?;
        Ok(docno(session, next))
    }

    fn stats(&self, tn: &str) -> Result<(u64, u64, u32)> {
        Ok(self
            .stats
            .get(tn)
            .map_err(map)?
            .map_or((0, 0, 0), |v| v.value()))
    }

    fn bump_stats(&mut self, tn: &str, docs: i64, len: i64) -> Result<()> {
        let (d, l, s) = self.stats(tn)?;
        self.stats
            .insert(
                tn,
                (
                    d.saturating_add_signed(docs),
                    l.saturating_add_signed(len),
                    s,
                ),
            )
            .map_err(map)?;
        Ok(())
    }
}

/// Adds `by` to the document frequency of `w`, removing it when it reaches zero.
fn add_df(
    df: &mut Table<'_, (&'static str, &'static str), u64>,
    tn: &str,
    w: &str,
    by: i64,
) -> Result<()> {
    let n = df
        .get((tn, w))
        .map_err(map)?
        .map_or(0, |v| v.value())
        .saturating_add_signed(by);
    if n == 0 {
        df.remove((tn, w)).map_err(map)?;
    } else {
        df.insert((tn, w), n).map_err(map)?;
    }
    Ok(())
}

fn doc_row(bytes: &[u8], tn: &str, sn: &str, p: &str) -> Result<DocRow> {
    let what = || format!("search document {tn}/{sn}/{p}");
    let row: DocRow = decode(bytes, what)?;
    if !row.terms.is_whole() {
        return Err(Error::corrupted(
            what(),
            "its words and their frequencies differ in number",
        ));
    }
    Ok(row)
}

/// The index tables, each given once.
const TABLES: [&str; 6] = [
    "search_docs",
    "search_refs",
    "search_postings",
    "search_df",
    "search_stats",
    "search_sessions",
];

/// Empties the index tables in `txn` (they exist, empty, afterwards).
fn clear(txn: &WriteTransaction) -> Result<()> {
    for name in TABLES {
        txn.delete_table(redb::TableDefinition::<(), ()>::new(name))
            .map_err(map)?;
    }
    drop(Index::open(txn)?);
    Ok(())
}

/// Whether the file keeps the index (`meta`'s `search_index`).
///
/// # Errors
/// [`Error::Backend`] from redb.
pub(crate) fn is_kept(txn: &ReadTransaction) -> Result<bool> {
    let meta = txn.open_table(META).map_err(map)?;
    Ok(meta.get(SEARCH_INDEX_KEY).map_err(map)?.map(|v| v.value()) == Some(1))
}

/// Records in `txn` whether the index is kept.
///
/// # Errors
/// [`Error::Backend`] from redb.
pub(crate) fn set_kept(txn: &WriteTransaction, kept: bool) -> Result<()> {
    txn.open_table(META)
        .map_err(map)?
        .insert(SEARCH_INDEX_KEY, u64::from(kept))
        .map_err(map)?;
    Ok(())
}

/// Builds the index from every part row in `txn` (emptying the tables first) and
/// records it kept; returns the number of part rows read and of documents indexed.
///
/// # Errors
/// [`Error::Codec`] naming a part row that does not decode; [`Error::Backend`] from
/// redb.
pub(crate) fn build(txn: &WriteTransaction) -> Result<(u64, u64)> {
    clear(txn)?;
    let parts = txn.open_table(PARTS).map_err(map)?;
    let mut index = Index::open(txn)?;
    let (mut rows, mut docs) = (0u64, 0u64);
    for entry in parts.iter().map_err(map)? {
        let (key, value) = entry.map_err(map)?;
        let (t, s, m, p) = key.value();
        let terms = Terms::of_row(value.value(), || format!("part row {t}/{s}/{m}/{p}"))?;
        rows += 1;
        docs += u64::from(terms.is_some());
        index.put(t, s, p, terms)?;
    }
    drop(index);
    set_kept(txn, true)?;
    Ok((rows, docs))
}

/// Empties the index in `txn` and records it absent.
///
/// # Errors
/// [`Error::Backend`] from redb.
pub(crate) fn drop_index(txn: &WriteTransaction) -> Result<()> {
    clear(txn)?;
    set_kept(txn, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_are_the_distinct_words_with_their_frequencies() {
        let t = Terms::of("The cat, the HAT; a cat.");
        let got: Vec<_> = t.iter().collect();
        assert_eq!(got, [("a", 1), ("cat", 2), ("hat", 1), ("the", 2)]);
        assert_eq!(t.len, 6);
        let (reference, len) = forge_core::search::term_frequencies("The cat, the HAT; a cat.");
        assert_eq!(len, t.len);
        assert!(reference.iter().map(|(w, &n)| (w.as_str(), n)).eq(t.iter()));
        let empty = Terms::of(" -- ");
        assert_eq!(empty.iter().count(), 0);
        assert!(empty.is_whole() && t.is_whole());
    }

    #[test]
    fn numbers_keep_a_session_in_one_range() {
        assert!(docno(1, u32::MAX) < docno(2, 0));
        assert_eq!(docno(u32::MAX, u32::MAX), u64::MAX);
    }
}
