//! Full-text search in both SQL backends ([`forge_core::search`] states the semantics):
//! an index written in the transaction of the rows, queried per tenant.
//!
//! - **What is indexed.** A part's [`index_text`]: the words of its
//!   [`document`](forge_core::search::document) as [`words`](forge_core::search::words)
//!   finds them (lowercased, runs of letters and digits), one space apart. The database's
//!   tokenizer splits that text at the spaces only, so its terms are exactly the words
//!   the contract matches on, whatever it would make of the raw text (Postgres's parser
//!   keeps `src/main.rs` as one token; FTS5's `unicode61` knows letters by Unicode 6.1
//!   and folds case its own way).
//!   A part without a document, or without a word in it, has no entry.
//! - **Scope.** Every entry carries tags, FNV-1a hashes of its tenant ([`tenant_hash`])
//!   and of its tenant and session ([`session_hash`]), so a query walks only the
//!   postings of its tenant or session; the rows' tenant and session columns are
//!   checked too, so colliding hashes never mix tenants.
//! - **Answer.** The database ranks the candidates (FTS5's `bm25()`, Postgres's
//!   `ts_rank`) and returns the best `limit` with their rows; each row's checksum is
//!   verified, its document checked to hold every word (a safety net: with a Postgres
//!   text search configuration that stems, a candidate may share only stems), and the
//!   next candidates are read while checks drop some. Every match is scored before the
//!   best are chosen, so a word in most of a tenant's parts costs a pass over all of
//!   them. The hits are then ordered by [`rank`].
//! - **Upgrade and `search=on|off`.** Each dialect records in `forge_meta` whether its
//!   index is kept; opening with `search=on` a database without one builds it in the
//!   open's migration transaction ([`backfill`]), opening with `search=off` drops it.

use forge_core::search::{rank, words, SearchHit, SearchQuery};
use forge_core::{Error, Part, Result, SessionId, TenantId};
use sqlx::QueryBuilder;

use crate::dialect::{Arg, Backend, Dialect, SqlDb};
use crate::plan::PartRow;
use crate::rows::{self, Origin};
use crate::stats::Tally;
use crate::{id_from_sql, CHUNK_ROWS};

/// The text the index holds for `part`: the words of its document, one space apart, or
/// `None` when the part is not searched or its document holds no word.
pub(crate) fn index_text(part: &Part) -> Option<String> {
    let doc = forge_core::search::document(part)?;
    let mut out = String::with_capacity(doc.len());
    for w in words(&doc) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&w);
    }
    (!out.is_empty()).then_some(out)
}

/// Parses the value of option `search` of a `backend` URL (`sqlite`, `postgres`):
/// `on` (true) or `off`, in any case.
///
/// # Errors
/// [`Error::InvalidInput`] naming the option, the value and the values allowed.
pub(crate) fn parse_switch(backend: &str, value: &str) -> Result<bool> {
    match value.to_ascii_lowercase().as_str() {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(Error::invalid(format!(
            "{backend} option search={value:?} is not known; use search=on or search=off"
        ))),
    }
}

/// FNV-1a, 64 bits, of `parts`, each followed by a separator byte: stable across
/// processes and releases, unlike `std`'s hasher.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The hash of a tenant's tag.
pub(crate) fn tenant_hash(tenant: &TenantId) -> u64 {
    fnv1a(&[tenant.as_str().as_bytes()])
}

/// The hash of a session's tag (of its tenant and id).
pub(crate) fn session_hash(tenant: &TenantId, session: &str) -> u64 {
    fnv1a(&[tenant.as_str().as_bytes(), session.as_bytes()])
}

/// What a candidates statement ([`Dialect::search_candidates`]) looks for.
pub(crate) struct Candidates<'a> {
    /// The tenant.
    pub tenant: &'a TenantId,
    /// The query's words ([`SearchQuery::words`]): letters and digits only.
    pub words: &'a [String],
    /// Only this session's parts.
    pub session: Option<&'a SessionId>,
    /// The index's text search configuration ([`Backend::search_config`]).
    // SQLite's index has one configuration, fixed in its schema.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub config: &'a str,
    /// Whether the candidates come from the database's search function
    /// ([`Backend::search_function`]).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub function: bool,
    /// At most this many.
    pub limit: usize,
    /// After skipping this many of the best.
    pub offset: usize,
}

/// The error of a search on a store opened with `search=off`.
fn off() -> Error {
    Error::Unsupported(
        "search is off for this database (search=off): no index is kept; open it with \
         search=on to build one"
            .to_owned(),
    )
}

/// Whether `doc` holds every one of `wanted` as a word.
fn holds_all(doc: &str, wanted: &[String]) -> bool {
    let mut found = vec![false; wanted.len()];
    let mut missing = wanted.len();
    for w in words(doc) {
        for (i, q) in wanted.iter().enumerate() {
            if !found[i] && *q == w {
                found[i] = true;
                missing -= 1;
            }
        }
        if missing == 0 {
            return true;
        }
    }
    false
}

/// [`forge_core::Store::search`] through the index: the best candidates, page by page
/// (one snapshot), until `limit` of them hold every word or none are left.
pub(crate) async fn search<B: Backend>(
    b: &B,
    tenant: &TenantId,
    query: &SearchQuery,
) -> Result<Vec<SearchHit>> {
    let Some(config) = b.search_config() else {
        return Err(off());
    };
    let words = query.words()?;
    let limit = query.limit();
    let at = crate::read::origin::<B::Db>(b.place(), "parts", tenant);
    let mut conn = b.reader(tenant, true).await?;
    let mut hits = Vec::with_capacity(limit);
    let mut offset = 0;
    loop {
        let mut q = B::Db::search_candidates(&Candidates {
            tenant,
            words: &words,
            session: query.session.as_ref(),
            config,
            function: b.search_function(),
            limit,
            offset,
        });
        let found = B::Db::fetch(&mut conn, &mut q).await.map_err(B::Db::map)?;
        for r in &found {
            let Some(body) = B::Db::opt_text(r, 0).map_err(B::Db::map)? else {
                continue;
            };
            let check = B::Db::opt_int(r, 1).map_err(B::Db::map)?;
            let key = B::Db::bytes(r, 2).map_err(B::Db::map)?;
            let score = B::Db::float(r, 3).map_err(B::Db::map)?;
            rows::verify(&body, check, &key, &at)?;
            let part = rows::part(tenant.as_str(), &body)?;
            let holds = forge_core::search::document(&part).is_some_and(|d| holds_all(&d, &words));
            if let Some(hit) = holds.then(|| SearchHit::of(&part, score, &words)).flatten() {
                hits.push(hit);
            }
        }
        if found.len() < limit || hits.len() >= limit {
            break;
        }
        offset += found.len();
    }
    conn.finish().await.map_err(B::Db::map)?;
    rank(&mut hits, limit);
    Ok(hits)
}

/// The key of the last part a [`backfill`] chunk read: tenant, session, message, id.
type PartKey = (String, String, String, String);

/// Indexes every part stored (the caller has emptied the index), in key order, 500 at
/// a time, inside the caller's transaction; returns how many parts got an entry. The
/// caller's connection must see every tenant's rows. A row that fails its checksum or
/// does not decode is left out with a warning: a read reports it anyway.
pub(crate) async fn backfill<D: Dialect>(
    conn: &mut D::Connection,
    place: &str,
    config: &str,
) -> Result<u64> {
    let mut after: Option<PartKey> = None;
    let mut indexed = 0;
    let mut tally = Tally::default();
    loop {
        let mut q = QueryBuilder::new(format!(
            "SELECT tenant, session, message, id, {}, checksum FROM parts",
            D::BODY
        ));
        if let Some((t, s, m, p)) = &after {
            q.push(" WHERE (tenant, session, message, id) > (");
            D::bind(&mut q, Arg::Text(t));
            for id in [s, m, p] {
                q.push(", ");
                D::bind(&mut q, Arg::Id(id));
            }
            q.push(")");
        }
        q.push(format_args!(
            " ORDER BY tenant, session, message, id LIMIT {CHUNK_ROWS}"
        ));
        let found = D::fetch(conn, &mut q).await.map_err(D::map)?;
        let Some(last) = found.last() else {
            break;
        };
        after = Some((
            D::text(last, 0).map_err(D::map)?,
            id_from_sql(D::bytes(last, 1).map_err(D::map)?)?,
            id_from_sql(D::bytes(last, 2).map_err(D::map)?)?,
            id_from_sql(D::bytes(last, 3).map_err(D::map)?)?,
        ));
        let mut by_tenant: Vec<(TenantId, Vec<PartRow>)> = Vec::new();
        for r in &found {
            let tenant = D::text(r, 0).map_err(D::map)?;
            let Some(row) = indexed_row::<D>(r, place, &tenant)? else {
                continue;
            };
            match by_tenant.last_mut() {
                Some((t, rows)) if t.as_str() == tenant => rows.push(row),
                _ => by_tenant.push((TenantId::new(&tenant)?, vec![row])),
            }
        }
        for (tenant, rows) in &by_tenant {
            D::index_parts(conn, tenant, rows, config, &mut tally).await?;
            indexed += rows.len() as u64;
        }
        if found.len() < CHUNK_ROWS {
            break;
        }
    }
    Ok(indexed)
}

/// The part of a [`backfill`] row (columns tenant, session, message, id, body,
/// checksum) with its index text, or `None` when it has none or cannot be read.
fn indexed_row<D: Dialect>(r: &D::Row, place: &str, tenant: &str) -> Result<Option<PartRow>> {
    let key = D::bytes(r, 3).map_err(D::map)?;
    let body = D::text(r, 4).map_err(D::map)?;
    let check = D::opt_int(r, 5).map_err(D::map)?;
    let at = Origin {
        place,
        table: "parts",
        tenant,
        unchecked_ok: D::UNCHECKED_ROWS,
        key_checked: D::KEY_CHECKED,
    };
    let part = match rows::verify(&body, check, &key, &at).and_then(|()| rows::part(tenant, &body))
    {
        Ok(part) => part,
        Err(e) => {
            tracing::warn!(error = %e, "not indexed for search: the part cannot be read");
            return Ok(None);
        }
    };
    let Some(doc) = index_text(&part) else {
        return Ok(None);
    };
    Ok(Some(PartRow {
        session: id_from_sql(D::bytes(r, 1).map_err(D::map)?)?,
        message: id_from_sql(D::bytes(r, 2).map_err(D::map)?)?,
        id: id_from_sql(key)?,
        open: part.is_open(),
        // Not written: the row is stored already.
        body: String::new(),
        doc: Some(doc),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_text_is_the_documents_words_one_space_apart() {
        let part: Part = serde_json::from_value(serde_json::json!({
            "id": "p", "sessionID": "s", "messageID": "m", "type": "text",
            "text": "Fix src/main.rs: E0308 — ÉTÉ ΟΔΟΣ\n\tdone",
        }))
        .unwrap();
        assert_eq!(
            index_text(&part).as_deref(),
            Some("fix src main rs e0308 été οδος done")
        );
        let empty: Part = serde_json::from_value(serde_json::json!({
            "id": "p", "sessionID": "s", "messageID": "m", "type": "text", "text": " -- ",
        }))
        .unwrap();
        assert_eq!(index_text(&empty), None);
    }

    #[test]
    fn a_document_holds_all_words_only_as_whole_words() {
        let q = |w: &[&str]| w.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(holds_all("Ember, dune", &q(&["dune", "ember"])));
        assert!(!holds_all("embers dune", &q(&["dune", "ember"])));
        assert!(!holds_all("", &q(&["a"])));
    }

    #[test]
    fn tags_differ_by_tenant_and_session() {
        let (a, b) = (TenantId::new("a").unwrap(), TenantId::new("b").unwrap());
        assert_ne!(tenant_hash(&a), tenant_hash(&b));
        assert_ne!(session_hash(&a, "s"), session_hash(&b, "s"));
        assert_ne!(session_hash(&a, "s"), tenant_hash(&a));
    }
}
