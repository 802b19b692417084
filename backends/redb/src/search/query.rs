//! Answering a query from the index.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use forge_core::search::{rank, Bm25, SearchHit, SearchQuery};
use forge_core::{Part, Result, TenantId};
use redb::{AccessGuard, ReadOnlyTable, ReadTransaction, ReadableTable};

use super::docno;
use super::postings::{decode_into, scan_start, Posting, MAX_BLOCK};
use crate::error::{inconsistent, map};
use crate::schema::{
    decode, from_json, successor, JsonRow, PartKey, PARTS, PART_MESSAGES, SEARCH_DF,
    SEARCH_POSTINGS, SEARCH_REFS, SEARCH_SESSIONS, SEARCH_STATS,
};

type Key = (&'static str, &'static str, u64);
type Blocks = redb::Range<'static, Key, &'static [u8]>;
/// A block's key and its bytes, not decoded.
type RawBlock = (u64, AccessGuard<'static, &'static [u8]>);

fn block_name(tn: &str, w: &str, key: u64) -> String {
    format!("search posting block {tn}/{w}/{key}")
}

/// The next block of `blocks`: its key and its bytes.
fn pull(blocks: &mut Blocks) -> Result<Option<RawBlock>> {
    match blocks.next() {
        Some(entry) => {
            let (k, v) = entry.map_err(map)?;
            Ok(Some((k.value().2, v)))
        }
        None => Ok(None),
    }
}

/// One word's postings from a number on, read block by block in number order, for
/// lookups of numbers that never decrease: a block is decoded only when a lookup falls
/// in it, so a rare candidate skips most blocks of a common word.
struct Cursor {
    tn: String,
    word: String,
    blocks: Blocks,
    /// The block after the current one.
    next: Option<RawBlock>,
    /// The current block, once a lookup reached it.
    raw: Option<RawBlock>,
    /// The current block decoded (empty until a lookup needs it).
    postings: Vec<Posting>,
    decoded: bool,
    /// Where the last lookup stopped in `postings`.
    at: usize,
}

impl Cursor {
    fn new(
        table: &ReadOnlyTable<Key, &'static [u8]>,
        tn: &str,
        word: &str,
        lo: u64,
        hi: u64,
    ) -> Result<Self> {
        let start = scan_start(table, tn, word, lo)?;
        let mut blocks = table
            .range((tn, word, start)..=(tn, word, hi))
            .map_err(map)?;
        let next = pull(&mut blocks)?;
        Ok(Self {
            tn: tn.to_owned(),
            word: word.to_owned(),
            blocks,
            next,
            raw: None,
            postings: Vec::with_capacity(MAX_BLOCK),
            decoded: false,
            at: 0,
        })
    }

    /// The posting of document `doc`, which is at least every number asked before.
    fn get(&mut self, doc: u64) -> Result<Option<Posting>> {
        while self.next.as_ref().is_some_and(|(key, _)| *key <= doc) {
            self.raw = self.next.take();
            self.decoded = false;
            self.next = pull(&mut self.blocks)?;
        }
        let Some((key, raw)) = &self.raw else {
            return Ok(None);
        };
        if !self.decoded {
            let (tn, w, key) = (&self.tn, &self.word, *key);
            decode_into(raw.value(), key, &mut self.postings, || {
                block_name(tn, w, key)
            })?;
            self.decoded = true;
            self.at = 0;
        }
        while self.postings.get(self.at).is_some_and(|p| p.doc < doc) {
            self.at += 1;
        }
        Ok(self.postings.get(self.at).filter(|p| p.doc == doc).copied())
    }
}

/// A candidate's score and number, ordered worst first: lower score, then higher
/// number (a tie keeps the older document).
#[derive(Clone, Copy)]
struct Scored {
    score: f64,
    docno: u64,
}

impl PartialEq for Scored {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Scored {}

impl PartialOrd for Scored {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scored {
    /// Greater is worse, so a max-heap's top is the worst kept.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .score
            .total_cmp(&self.score)
            .then(self.docno.cmp(&other.docno))
    }
}

/// The best `limit` candidates seen.
struct Best {
    limit: usize,
    heap: BinaryHeap<Scored>,
}

impl Best {
    fn offer(&mut self, s: Scored) {
        if self.heap.len() < self.limit {
            self.heap.push(s);
        } else if self.heap.peek().is_some_and(|worst| s < *worst) {
            self.heap.pop();
            self.heap.push(s);
        }
    }
}

/// Answers `query` from the index in the read snapshot `txn`.
///
/// The rarest word's postings (within the session's number range when `query.session`
/// is set) are the candidates; a candidate is a match when every other word has a
/// posting for it, looked up in that word's postings read alongside in number order
/// ([`Cursor`]). Every match is scored by BM25 over the tenant's statistics, summed in
/// the query's word order as [`forge_core::search::scan`] does, and the best `limit`
/// are read from their part rows.
///
/// # Errors
/// [`forge_core::Error::InvalidInput`] for a query without words;
/// [`forge_core::Error::Codec`] or [`forge_core::Error::Corrupted`] for rows that do not
/// decode or an index that names a missing row; [`forge_core::Error::Backend`] from
/// redb.
pub(crate) fn search(
    txn: &ReadTransaction,
    tenant: &TenantId,
    query: &SearchQuery,
) -> Result<Vec<SearchHit>> {
    let words = query.words()?;
    let tn = tenant.as_str();
    let stats = txn.open_table(SEARCH_STATS).map_err(map)?;
    let Some((docs, total_len, _)) = stats.get(tn).map_err(map)?.map(|v| v.value()) else {
        return Ok(Vec::new());
    };
    let df_table = txn.open_table(SEARCH_DF).map_err(map)?;
    let mut dfs = Vec::with_capacity(words.len());
    for w in &words {
        match df_table.get((tn, w.as_str())).map_err(map)? {
            Some(v) => dfs.push(v.value()),
            None => return Ok(Vec::new()),
        }
    }
    let (lo, hi) = match &query.session {
        Some(s) => {
            let sessions = txn.open_table(SEARCH_SESSIONS).map_err(map)?;
            match sessions.get((tn, s.as_str())).map_err(map)? {
                Some(v) => {
                    let (n, _) = v.value();
                    (docno(n, 0), docno(n, u32::MAX))
                }
                None => return Ok(Vec::new()),
            }
        }
        None => (0, u64::MAX),
    };
    let rarest = (0..words.len()).min_by_key(|&i| dfs[i]).unwrap_or(0);
    let postings = txn.open_table(SEARCH_POSTINGS).map_err(map)?;
    let mut others = Vec::with_capacity(words.len() - 1);
    for (i, w) in words.iter().enumerate() {
        if i != rarest {
            others.push((i, Cursor::new(&postings, tn, w, lo, hi)?));
        }
    }
    // The rarer a word, the sooner it rules a candidate out.
    others.sort_by_key(|(i, _)| dfs[*i]);
    let bm25 = Bm25::new(docs, total_len);
    let mut best = Best {
        limit: query.limit(),
        heap: BinaryHeap::with_capacity(query.limit() + 1),
    };
    let mut tfs = vec![0u32; words.len()];
    let first = words[rarest].as_str();
    let mut block = Vec::with_capacity(MAX_BLOCK);
    let start = scan_start(&postings, tn, first, lo)?;
    for entry in postings
        .range((tn, first, start)..=(tn, first, hi))
        .map_err(map)?
    {
        let (k, v) = entry.map_err(map)?;
        let key = k.value().2;
        decode_into(v.value(), key, &mut block, || block_name(tn, first, key))?;
        'candidates: for p in block.iter().filter(|p| (lo..=hi).contains(&p.doc)) {
            tfs[rarest] = p.tf;
            for (i, cursor) in &mut others {
                match cursor.get(p.doc)? {
                    Some(q) => tfs[*i] = q.tf,
                    None => continue 'candidates,
                }
            }
            let score: f64 = tfs
                .iter()
                .zip(&dfs)
                .map(|(&tf, &df)| bm25.score(tf, df, p.len))
                .sum();
            best.offer(Scored {
                score,
                docno: p.doc,
            });
        }
    }
    let mut hits = Vec::with_capacity(best.heap.len());
    let refs = txn.open_table(SEARCH_REFS).map_err(map)?;
    let index = txn.open_table(PART_MESSAGES).map_err(map)?;
    let parts = txn.open_table(PARTS).map_err(map)?;
    for Scored { score, docno } in best.heap {
        let at = || format!("search reference {tn}/{docno}");
        let reference = refs
            .get((tn, docno))
            .map_err(map)?
            .ok_or_else(|| inconsistent(at(), "a posting names a document without a reference"))?;
        let (s, p) = reference.value();
        let m = holder(&index, tn, s, p)?
            .ok_or_else(|| inconsistent(at(), format!("part {s}/{p} has no row")))?;
        let what = || format!("part row {tn}/{s}/{m}/{p}");
        let value = parts
            .get((tn, s, m.as_str(), p))
            .map_err(map)?
            .ok_or_else(|| inconsistent(at(), format!("part {s}/{m}/{p} has no row")))?;
        let row: JsonRow = decode(value.value(), what)?;
        let part: Part = from_json(&row.json, what)?;
        if let Some(hit) = SearchHit::of(&part, score, &words) {
            hits.push(hit);
        }
    }
    rank(&mut hits, query.limit());
    Ok(hits)
}

/// The message of session `sn` that holds part `p` (the first, for a file whose release
/// before schema version 2 wrote it under several).
fn holder(
    index: &impl ReadableTable<PartKey, ()>,
    tn: &str,
    sn: &str,
    p: &str,
) -> Result<Option<String>> {
    let hi = successor(p);
    let first = index
        .range((tn, sn, p, "")..(tn, sn, hi.as_str(), ""))
        .map_err(map)?
        .next();
    match first {
        Some(entry) => Ok(Some(entry.map_err(map)?.0.value().3.to_owned())),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worst_candidate_is_the_greatest() {
        let a = Scored {
            score: 2.0,
            docno: 5,
        };
        let b = Scored {
            score: 1.0,
            docno: 1,
        };
        let c = Scored {
            score: 2.0,
            docno: 9,
        };
        assert!(b > a && c > a);
        let mut best = Best {
            limit: 2,
            heap: BinaryHeap::new(),
        };
        for s in [b, c, a] {
            best.offer(s);
        }
        let kept: Vec<u64> = best
            .heap
            .into_sorted_vec()
            .iter()
            .map(|s| s.docno)
            .collect();
        assert_eq!(kept, [5, 9]);
    }
}
