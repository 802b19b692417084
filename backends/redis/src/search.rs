//! `Store::search` over a tenant's full-text index (see the crate docs, "Full-text
//! index"): the postings of the query's words, intersected rarest first, scored by
//! BM25 for every match, and the best read back with their rows by one script.

use std::collections::HashMap;
use std::sync::LazyLock;

use forge_core::search::{rank, Bm25, SearchHit, SearchQuery};
use forge_core::{Error, Part, Result, SessionId, TenantId};
use redis::Script;

use crate::error::map;
use crate::index::{unposting, Built};
use crate::store::{decode, RedisStore};

/// Reads documents' locations, or their rows and postings (`fetch.lua`).
static FETCH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("search.lua"),
        include_str!("fetch.lua")
    ))
});

/// A word with more postings than this is read with `HSCAN`, in pieces, not with one
/// `HGETALL` that would hold the server for long. (`HSCAN` costs the server about
/// three times what `HGETALL` does per field: below this, one command is cheaper.)
const SCAN_ABOVE: u64 = 250_000;
/// Fields per `HMGET` / `HSCAN` step.
const CHUNK: usize = 4096;
/// Documents per fetch script.
const FETCH_CHUNK: usize = 512;

/// The documents holding every word of a query, with what scoring needs.
struct Found {
    bm25: Bm25,
    /// Per query word, the documents holding it.
    df: Vec<u64>,
    /// Document numbers.
    ids: Vec<u64>,
    /// `ids.len() × words` counts, row by row, in query word order.
    tfs: Vec<u32>,
    /// Per document, its length in words.
    lens: Vec<u32>,
}

impl Found {
    /// Keeps the documents for which `f(index, its row of k counts)` holds (`f` may
    /// fill in the row).
    fn keep(&mut self, k: usize, mut f: impl FnMut(usize, &mut [u32]) -> bool) {
        let mut at = 0;
        for i in 0..self.ids.len() {
            let (lo, hi) = (i * k, (i + 1) * k);
            if f(i, &mut self.tfs[lo..hi]) {
                self.ids[at] = self.ids[i];
                self.lens[at] = self.lens[i];
                self.tfs.copy_within(lo..hi, at * k);
                at += 1;
            }
        }
        self.ids.truncate(at);
        self.lens.truncate(at);
        self.tfs.truncate(at * k);
    }

    /// The score the scan gives: the words' BM25 scores summed in query order.
    fn score(&self, tfs: &[u32], len: u32) -> f64 {
        tfs.iter()
            .zip(&self.df)
            .map(|(&tf, &df)| self.bm25.score(tf, df, len))
            .sum()
    }
}

impl RedisStore {
    /// See [`forge_core::Store::search`].
    pub(crate) async fn search_in(
        &self,
        tenant: &TenantId,
        query: &SearchQuery,
    ) -> Result<Vec<SearchHit>> {
        if !self.search_on() {
            return Err(Error::Unsupported(format!(
                "search is off for this database (search=off in the URL of prefix {:?}); \
                 open it with search=on to build the full-text index",
                self.keys().prefix()
            )));
        }
        let words = query.words()?;
        let limit = query.limit();
        if !self.ensure_index(tenant).await? {
            return Ok(Vec::new());
        }
        let found = match &query.session {
            Some(s) => self.session_matches(tenant, s, &words).await?,
            None => self.tenant_matches(tenant, &words).await?,
        };
        let Some(found) = found else {
            return Ok(Vec::new());
        };
        let chosen = self.choose(tenant, &found, &words, limit).await?;
        let mut hits = Vec::with_capacity(chosen.len());
        for chunk in chosen.chunks(FETCH_CHUNK) {
            for item in self.fetch(tenant, "row", &words, chunk).await? {
                // sid, mid, pid, row, a posting per word; empty: gone meanwhile.
                let [_, _, _, row, values @ ..] = item.as_slice() else {
                    continue;
                };
                let mut tfs = Vec::with_capacity(values.len());
                let mut len = 0;
                for v in values {
                    let (tf, l) = unposting(number(v)?);
                    tfs.push(tf);
                    len = l;
                }
                let part: Part = decode(row, "part")?;
                if let Some(hit) = SearchHit::of(&part, found.score(&tfs, len), &words) {
                    hits.push(hit);
                }
            }
        }
        rank(&mut hits, limit);
        Ok(hits)
    }

    /// Whether `tenant` has documents to search, building its index first when it has
    /// rows but no ready index (written before the index existed, or by a store with
    /// `search=off`).
    async fn ensure_index(&self, tenant: &TenantId) -> Result<bool> {
        let (state, sessions): (Option<String>, u64) = redis::pipe()
            .hget(format!("{}:s", self.keys().index(tenant)), "state")
            .zcard(self.keys().sessions(tenant))
            .query_async(&mut self.connection())
            .await
            .map_err(map)?;
        match state.as_deref() {
            Some("ready") => Ok(true),
            None if sessions == 0 => Ok(false),
            _ => match self.build_index(tenant).await? {
                Built::Ready => Ok(true),
                Built::Stopped => Err(Error::conflict(format!(
                    "the full-text index of tenant {tenant} is being dropped by a store \
                     opened with search=off"
                ))),
            },
        }
    }

    /// The tenant's documents holding every word: the rarest word's postings (which
    /// carry the documents' lengths), narrowed by each other word's in turn; BM25 over
    /// the whole tenant.
    async fn tenant_matches(&self, tenant: &TenantId, words: &[String]) -> Result<Option<Found>> {
        let index = self.keys().index(tenant);
        let mut pipe = redis::pipe();
        for w in words {
            pipe.hlen(format!("{index}:w:{w}"));
        }
        let df: Vec<u64> = pipe
            .query_async(&mut self.connection())
            .await
            .map_err(map)?;
        if df.contains(&0) {
            return Ok(None);
        }
        let mut order: Vec<usize> = (0..words.len()).collect();
        order.sort_by_key(|&j| df[j]);
        let k = words.len();
        let rarest = order[0];
        let postings = self
            .postings(&format!("{index}:w:{}", words[rarest]), df[rarest])
            .await?;
        let mut found = Found {
            bm25: Bm25::new(0, 0),
            df: Vec::new(),
            ids: Vec::with_capacity(postings.len()),
            tfs: vec![0u32; postings.len() * k],
            lens: Vec::with_capacity(postings.len()),
        };
        for (i, (id, v)) in postings.into_iter().enumerate() {
            let (tf, len) = unposting(v);
            found.ids.push(id);
            found.lens.push(len);
            found.tfs[i * k + rarest] = tf;
        }
        for &j in &order[1..] {
            let key = format!("{index}:w:{}", words[j]);
            // Reading a whole hash costs the server about half what looking fields up
            // does: read the word's postings whole when they are not many more.
            let got: Vec<Option<u64>> = if df[j] <= 2 * found.ids.len() as u64 {
                let all: HashMap<u64, u64> =
                    self.postings(&key, df[j]).await?.into_iter().collect();
                found.ids.iter().map(|id| all.get(id).copied()).collect()
            } else {
                self.hmget(&key, &found.ids).await?
            };
            found.keep(k, |i, row| {
                got[i].inspect(|&v| row[j] = unposting(v).0).is_some()
            });
            if found.ids.is_empty() {
                return Ok(None);
            }
        }
        let (docs, total): (Option<u64>, Option<u64>) = redis::cmd("HMGET")
            .arg(format!("{index}:s"))
            .arg("docs")
            .arg("len")
            .query_async(&mut self.connection())
            .await
            .map_err(map)?;
        found.bm25 = Bm25::new(docs.unwrap_or(0), total.unwrap_or(0));
        found.df = df;
        Ok(Some(found))
    }

    /// The session's documents holding every word: each word's postings of every
    /// document of the session; BM25 over the session, as the scan of one session.
    async fn session_matches(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        words: &[String],
    ) -> Result<Option<Found>> {
        let index = self.keys().index(tenant);
        let base = self.keys().session_base(tenant, session);
        let key = self.keys().session_docs(&base);
        // Part id → `DOC:LEN`.
        let docs: Vec<String> = redis::cmd("HVALS")
            .arg(&key)
            .query_async(&mut self.connection())
            .await
            .map_err(map)?;
        if docs.is_empty() {
            return Ok(None);
        }
        let mut all = Vec::with_capacity(docs.len());
        let mut lens = Vec::with_capacity(docs.len());
        for d in &docs {
            let (id, len) = d
                .split_once(':')
                .and_then(|(id, len)| Some((id.parse().ok()?, len.parse().ok()?)))
                .ok_or_else(|| {
                    Error::corrupted(&key, format!("{d:?} is not a document number and length"))
                })?;
            all.push(id);
            lens.push(len);
        }
        let mut columns = Vec::with_capacity(words.len());
        for w in words {
            columns.push(self.hmget(&format!("{index}:w:{w}"), &all).await?);
        }
        let total: u64 = lens.iter().copied().map(u64::from).sum();
        let mut found = Found {
            bm25: Bm25::new(all.len() as u64, total),
            df: columns
                .iter()
                .map(|c| c.iter().flatten().count() as u64)
                .collect(),
            ids: all,
            tfs: Vec::with_capacity(docs.len() * words.len()),
            lens,
        };
        for i in 0..found.ids.len() {
            found
                .tfs
                .extend(columns.iter().map(|c| c[i].map_or(0, |v| unposting(v).0)));
        }
        found.keep(words.len(), |i, _| columns.iter().all(|c| c[i].is_some()));
        Ok((!found.ids.is_empty()).then_some(found))
    }

    /// The documents whose rows to read: every match when they are at most `limit`;
    /// else those scoring above the `limit`-th score and, of those tied with it, the
    /// first by session, message and part id (the order `rank` breaks ties in).
    async fn choose(
        &self,
        tenant: &TenantId,
        found: &Found,
        words: &[String],
        limit: usize,
    ) -> Result<Vec<u64>> {
        let k = words.len();
        let scores: Vec<f64> = (0..found.ids.len())
            .map(|i| found.score(&found.tfs[i * k..(i + 1) * k], found.lens[i]))
            .collect();
        let mut order: Vec<usize> = (0..scores.len()).collect();
        if order.len() <= limit {
            return Ok(order.into_iter().map(|i| found.ids[i]).collect());
        }
        // The limit-th best score, then what scores above it and what ties with it.
        let by_score = |a: &usize, b: &usize| scores[*b].total_cmp(&scores[*a]);
        let kth = scores[*order.select_nth_unstable_by(limit - 1, by_score).1];
        let mut chosen: Vec<u64> = Vec::with_capacity(limit);
        let mut tied: Vec<u64> = Vec::new();
        for i in order {
            match scores[i].total_cmp(&kth) {
                std::cmp::Ordering::Greater => chosen.push(found.ids[i]),
                std::cmp::Ordering::Equal => tied.push(found.ids[i]),
                std::cmp::Ordering::Less => {}
            }
        }
        let above = chosen.len();
        let tied_end = above + tied.len();
        if tied_end <= 2 * limit {
            chosen.extend(tied);
            return Ok(chosen);
        }
        // Many documents share the boundary score: order them by location.
        let mut located = Vec::with_capacity(tied.len());
        for chunk in tied.chunks(FETCH_CHUNK) {
            let locs = self.fetch(tenant, "loc", words, chunk).await?;
            for (id, loc) in chunk.iter().zip(locs) {
                if let [s, m, p] = loc.as_slice() {
                    located.push((s.clone(), m.clone(), p.clone(), *id));
                }
            }
        }
        located.sort();
        chosen.extend(located.into_iter().take(limit - above).map(|(.., id)| id));
        Ok(chosen)
    }

    /// The fetch script over `ids` (see `fetch.lua`).
    async fn fetch(
        &self,
        tenant: &TenantId,
        mode: &str,
        words: &[String],
        ids: &[u64],
    ) -> Result<Vec<Vec<Vec<u8>>>> {
        let index = self.keys().index(tenant);
        let tb = index.strip_suffix(":x").unwrap_or(&index);
        FETCH
            .key(self.keys().sessions(tenant))
            .arg(tb)
            .arg(mode)
            .arg(words.len())
            .arg(words)
            .arg(ids)
            .invoke_async(&mut self.connection())
            .await
            .map_err(map)
    }

    /// Every posting of a word's hash `key` (`df` of them, as counted before).
    async fn postings(&self, key: &str, df: u64) -> Result<Vec<(u64, u64)>> {
        if df <= SCAN_ABOVE {
            return redis::cmd("HGETALL")
                .arg(key)
                .query_async(&mut self.connection())
                .await
                .map_err(map);
        }
        let mut out = Vec::new();
        let mut cursor = 0u64;
        loop {
            let (next, page): (u64, Vec<(u64, u64)>) = redis::cmd("HSCAN")
                .arg(key)
                .arg(cursor)
                .arg("COUNT")
                .arg(CHUNK)
                .query_async(&mut self.connection())
                .await
                .map_err(map)?;
            out.extend(page);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        // A rehash during the scan may return a field twice.
        out.sort_unstable();
        out.dedup_by_key(|p| p.0);
        Ok(out)
    }

    /// `HMGET key ids…` in pieces, pipelined: one value or `None` per id.
    async fn hmget(&self, key: &str, ids: &[u64]) -> Result<Vec<Option<u64>>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for chunk in ids.chunks(CHUNK) {
            pipe.cmd("HMGET").arg(key).arg(chunk);
        }
        let parts: Vec<Vec<Option<u64>>> = pipe
            .query_async(&mut self.connection())
            .await
            .map_err(map)?;
        Ok(parts.into_iter().flatten().collect())
    }
}

/// A posting's value, read back.
fn number(bytes: &[u8]) -> Result<u64> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            Error::corrupted(
                "redis full-text index",
                format!(
                    "posting value {:?} is not a number",
                    String::from_utf8_lossy(bytes)
                ),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_moves_the_kept_documents_down() {
        let mut found = Found {
            bm25: Bm25::new(1, 1),
            df: vec![1, 1],
            ids: vec![1, 2, 3, 4],
            tfs: vec![1, 1, 2, 2, 3, 3, 4, 4],
            lens: vec![10, 20, 30, 40],
        };
        found.keep(2, |i, row| {
            row[1] += 10;
            i % 2 == 1
        });
        assert_eq!(found.ids, [2, 4]);
        assert_eq!(found.tfs, [2, 12, 4, 14]);
        assert_eq!(found.lens, [20, 40]);
    }
}
