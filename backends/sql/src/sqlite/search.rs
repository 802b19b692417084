//! SQLite's search index ([`crate::search`]): FTS5.
//!
//! - `search_docs (doc INTEGER PRIMARY KEY, tenant, session, message, part)`, unique on
//!   `(tenant, session, message, part)`: the part row each index entry stands for.
//! - `search`, a contentless FTS5 table (`content=''`, `contentless_delete=1`: the
//!   text is not stored, entries can be deleted) whose rowid is `search_docs.doc`.
//!   Column `text` holds the part's [`index_text`](crate::search::index_text) with
//!   every word prefixed by its tenant's tag `t<hex>` (17 characters), so each term's
//!   postings are one tenant's: a query reads only its tenant's documents, without
//!   intersecting a posting list of the whole tenant. Column `scope` holds the tag
//!   `s<hex>` of the session. Tokenizer `ascii`: the text is lowercase words one space
//!   apart, and `ascii` keeps every non-ASCII character inside its token, so FTS5's
//!   terms are exactly the tagged words. Terms are stored prefix-compressed, so the
//!   tags cost little space in the index.
//! - Triggers `parts_unindex` (`AFTER DELETE ON parts`) and `parts_reindex` (`AFTER
//!   UPDATE ON parts`) delete a part's entry and its `search_docs` row with the row's
//!   version: a part removed, moved (its old row is deleted), taken with its message or
//!   session (foreign-key cascades fire triggers) or overwritten leaves nothing of it.
//!   The write path then adds the entries of the parts it wrote that hold words, with
//!   statements of their own; a part without words costs no statement.
//! - `forge_meta` key `search`: 1 while the index is kept, 0 after `search=off`.
//!
//! A query is `text : "t<hex>w1" AND text : "t<hex>w2" …` (`AND scope : "s<hex>"` for
//! a session's search), ranked by `-bm25(search, 0.0, 1.0)` (the session tag weighs
//! nothing); the best `limit` are then joined to `search_docs`, which must name the
//! tenant (and session) asked for: a tenant whose tag collides shows as candidates that
//! join nothing, and the next candidates are read ([`crate::search::search`]).

use std::fmt::Write as _;
use std::path::Path;

use forge_core::{Result, TenantId};
use sqlx::{QueryBuilder, Sqlite, SqliteConnection};

use crate::dialect::{Arg, Dialect, SqlDb};
use crate::error::sqlite as map;
use crate::plan::PartRow;
use crate::search::{session_hash, tenant_hash, Candidates};
use crate::stats::Tally;
use crate::CHUNK_ROWS;

/// The FTS5 tokenizer of `search`, as [`crate::dialect::Backend::search_config`] names
/// it.
pub(crate) const TOKENIZER: &str = "ascii";

/// The tag of a tenant, before each of its words in column `text`.
fn tenant_tag(tenant: &TenantId) -> String {
    format!("t{:016x}", tenant_hash(tenant))
}

/// The tag of a session in column `scope`.
fn session_tag(tenant: &TenantId, session: &str) -> String {
    format!("s{:016x}", session_hash(tenant, session))
}

/// `text` (words one space apart) with `tag` before each word.
fn tagged(tag: &str, text: &str) -> String {
    let words = text.split(' ');
    let mut out = String::with_capacity(text.len() + (tag.len() + 1) * words.clone().count());
    for (i, w) in words.enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(tag);
        out.push_str(w);
    }
    out
}

/// [`Dialect::search_candidates`].
pub(crate) fn candidates(c: &Candidates<'_>) -> QueryBuilder<Sqlite> {
    // Words are letters and digits only: quoted, they are FTS5 strings of one token.
    let tag = tenant_tag(c.tenant);
    let mut expr = String::new();
    for (i, w) in c.words.iter().enumerate() {
        let and = if i == 0 { "" } else { " AND " };
        let _ = write!(expr, "{and}text : \"{tag}{w}\"");
    }
    if let Some(s) = c.session {
        let _ = write!(
            expr,
            " AND scope : \"{}\"",
            session_tag(c.tenant, s.as_str())
        );
    }
    // The best candidates from the full-text index alone, then their rows: a candidate
    // of another tenant (or session) joins nothing and reads as NULLs.
    let mut q = QueryBuilder::new(
        "SELECT p.body, p.checksum, p.id, h.score FROM (\
         SELECT rowid AS doc, -bm25(search, 0.0, 1.0) AS score FROM search \
         WHERE search MATCH ",
    );
    q.push_bind(expr);
    q.push(format_args!(
        " ORDER BY score DESC, rowid LIMIT {} OFFSET {}) h \
         LEFT JOIN search_docs d ON d.doc = h.doc AND d.tenant = ",
        c.limit, c.offset
    ));
    Sqlite::bind(&mut q, Arg::Text(c.tenant.as_str()));
    if let Some(s) = c.session {
        q.push(" AND d.session = ");
        Sqlite::bind(&mut q, Arg::Id(s.as_str()));
    }
    q.push(
        " LEFT JOIN parts p ON p.tenant = d.tenant AND p.session = d.session \
         AND p.message = d.message AND p.id = d.part",
    );
    q
}

/// [`Dialect::index_parts`]: an entry for each part with a text (a `search_docs` row,
/// then the FTS5 row under its `doc`), two statements per chunk. The entries of the parts'
/// earlier versions are gone already (triggers `parts_unindex` and `parts_reindex`).
pub(crate) async fn index_parts(
    conn: &mut SqliteConnection,
    tenant: &TenantId,
    rows: &[PartRow],
    tally: &mut Tally,
) -> Result<()> {
    let t = Arg::Text(tenant.as_str());
    let with: Vec<(&PartRow, &str)> = rows
        .iter()
        .filter_map(|p| p.doc.as_deref().map(|d| (p, d)))
        .collect();
    let tag = tenant_tag(tenant);
    for chunk in with.chunks(CHUNK_ROWS) {
        let mut q =
            QueryBuilder::new("INSERT INTO search_docs (tenant, session, message, part) VALUES ");
        Sqlite::push_tuples(&mut q, chunk, |(p, _)| {
            [
                t,
                Arg::Id(p.session.as_str()),
                Arg::Id(p.message.as_str()),
                Arg::Id(p.id.as_str()),
            ]
        });
        let done = Sqlite::execute(conn, &mut q).await.map_err(map)?;
        tally.statement(done.rows_affected());
        // Each text joins its new `doc` by the part's key.
        let mut q = QueryBuilder::new(
            "INSERT INTO search (rowid, scope, text) SELECT d.doc, v.column4, v.column5 FROM (VALUES ",
        );
        for (i, (p, text)) in chunk.iter().enumerate() {
            q.push(if i == 0 { "(" } else { ", (" });
            for id in [p.session.as_str(), p.message.as_str(), p.id.as_str()] {
                Sqlite::bind(&mut q, Arg::Id(id));
                q.push(", ");
            }
            q.push_bind(session_tag(tenant, p.session.as_str()));
            q.push(", ");
            q.push_bind(tagged(&tag, text));
            q.push(")");
        }
        q.push(") AS v CROSS JOIN search_docs d ON d.tenant = ");
        Sqlite::bind(&mut q, t);
        q.push(" AND d.session = v.column1 AND d.message = v.column2 AND d.part = v.column3");
        let done = Sqlite::execute(conn, &mut q).await.map_err(map)?;
        tally.statement(done.rows_affected());
    }
    Ok(())
}

/// Empties the index: FTS5's `delete-all`, then `search_docs`.
async fn clear(conn: &mut SqliteConnection) -> Result<()> {
    sqlx::raw_sql(
        "INSERT INTO search (search) VALUES ('delete-all'); \
         DELETE FROM search_docs;",
    )
    .execute(&mut *conn)
    .await
    .map_err(map)?;
    Ok(())
}

/// Brings the index to `on` inside the open's migration transaction: builds it from the
/// rows when it is not kept (a database of schema version 5, or one opened with
/// `search=off`), drops it for `search=off`, and records the state in `forge_meta`.
pub(crate) async fn sync(conn: &mut SqliteConnection, path: &Path, on: bool) -> Result<()> {
    let kept: Option<i64> = sqlx::query_scalar("SELECT value FROM forge_meta WHERE key = 'search'")
        .fetch_optional(&mut *conn)
        .await
        .map_err(map)?;
    match (kept, on) {
        (Some(1), true) | (Some(0), false) => return Ok(()),
        (Some(1), false) => {
            clear(conn).await?;
            tracing::info!(file = %path.display(), "search=off: dropped the search index");
        }
        (_, false) => {}
        (_, true) => {
            clear(conn).await?;
            let place = format!("SQLite database {}", path.display());
            let parts = crate::search::backfill::<Sqlite>(conn, &place, TOKENIZER).await?;
            // A new database has nothing to index: no news.
            if kept.is_some() || parts > 0 {
                tracing::info!(
                    file = %path.display(),
                    parts,
                    "search=on: built the search index from the rows"
                );
            }
        }
    }
    sqlx::query(
        "INSERT INTO forge_meta (key, value) VALUES ('search', ?) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )
    .bind(i64::from(on))
    .execute(&mut *conn)
    .await
    .map_err(map)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_carries_the_tenant_tag() {
        assert_eq!(tagged("t01", "fix main rs"), "t01fix t01main t01rs");
        assert_eq!(tagged("t01", "été"), "t01été");
    }
}
