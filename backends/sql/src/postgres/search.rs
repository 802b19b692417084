//! Postgres's search index ([`crate::search`]): a `tsvector` column of `parts`.
//!
//! - `parts.search` (present while `search=on`): `to_tsvector(<config>, <index text>)`
//!   of the part's [`index_text`](crate::search::index_text), plus the lexemes
//!   `t_<hex>` of its tenant and `s_<hex>` of its session (the parser splits words at
//!   `_`, so no word becomes one); NULL for a part without a text. Set by the part
//!   upsert itself, so an entry goes with its row (removals, moves, cascades) and the
//!   tenant policy of `parts` covers it. Index `parts_search`: GIN.
//! - `forge_meta` row `search`: `value` 1 with `note` the configuration the column was
//!   built with, or 0 after `search=off`.
//!
//! A query is `search @@ (plainto_tsquery(<config>, 'w1 w2') && '<tag>'::tsquery)`,
//! ranked by `ts_rank(search, plainto_tsquery(<config>, 'w1 w2'))`, on top of the
//! `tenant` (and `session`) filters.
//!
//! **Row-level security and the index.** Under a policy, Postgres evaluates the
//! policy's condition before any condition whose operator is not leakproof, and `@@`
//! is not (no GIN operator is): a query bound by the policy cannot use `parts_search`
//! and reads every row of the tenant. So when the schema is set up by a superuser or a
//! `BYPASSRLS` role (queries then run as the application role), the candidates come
//! from `search_candidates(words, tag, session, limit, offset)`, a `SECURITY DEFINER`
//! PL/pgSQL function owned by that role, granted to the application role only, whose query
//! keeps exactly the policy's rule, `tenant = current_setting('forge.tenant', true)`,
//! and can use the index. The parts' rows are then read under the policy as usual.
//! A schema set up by a role bound by the policy has no such function: its searches
//! read the tenant's rows (or the session's) through the policy.

use forge_core::{Error, Result, TenantId};
use sqlx::{AssertSqlSafe, PgConnection, Postgres, QueryBuilder};

use super::config::PostgresOptions;
use crate::dialect::{Arg, Dialect, SqlDb};
use crate::error::postgres as map;
use crate::plan::PartRow;
use crate::search::{session_hash, tenant_hash, Candidates};
use crate::stats::Tally;
use crate::CHUNK_ROWS;

/// `config` as a SQL `regconfig` value (names were checked to be plain identifiers when
/// parsed and resolved by the server on connect).
fn regconfig(config: &str) -> String {
    format!("'{}'::regconfig", config.replace('\'', "''"))
}

/// The tag lexeme of a tenant.
fn tenant_tag(tenant: &TenantId) -> String {
    format!("t_{:016x}", tenant_hash(tenant))
}

/// The tag lexeme of a session.
fn session_tag(tenant: &TenantId, session: &str) -> String {
    format!("s_{:016x}", session_hash(tenant, session))
}

/// The tags of a part, as a `tsvector` literal.
fn tags(tenant: &TenantId, session: &str) -> String {
    format!("{} {}", tenant_tag(tenant), session_tag(tenant, session))
}

/// [`Dialect::push_search`]: `to_tsvector(<config>, $doc) || $tags::tsvector`.
pub(crate) fn push_search(
    q: &mut QueryBuilder<Postgres>,
    tenant: &TenantId,
    row: &PartRow,
    config: &str,
) {
    q.push(format_args!("to_tsvector({}, ", regconfig(config)));
    q.push_bind(row.doc.as_deref());
    q.push(") || ");
    q.push_bind(tags(tenant, row.session.as_str()));
    q.push("::tsvector");
}

/// [`Dialect::index_parts`]: one `UPDATE … FROM (VALUES …)` per chunk (the backfill;
/// the write path sets the column in the upsert).
pub(crate) async fn index_parts(
    conn: &mut PgConnection,
    tenant: &TenantId,
    rows: &[PartRow],
    config: &str,
    tally: &mut Tally,
) -> Result<()> {
    for chunk in rows.chunks(CHUNK_ROWS) {
        let mut q = QueryBuilder::new(format!(
            "UPDATE parts SET search = to_tsvector({}, v.doc) || v.tags::tsvector FROM (VALUES ",
            regconfig(config)
        ));
        for (i, p) in chunk.iter().enumerate() {
            q.push(if i == 0 { "(" } else { ", (" });
            for id in [&p.session.as_str(), &p.message.as_str(), &p.id.as_str()] {
                Postgres::bind(&mut q, Arg::Id(id));
                q.push(", ");
            }
            q.push_bind(p.doc.as_deref());
            q.push(", ");
            q.push_bind(tags(tenant, p.session.as_str()));
            q.push(")");
        }
        q.push(") AS v (session, message, id, doc, tags) WHERE parts.tenant = ");
        Postgres::bind(&mut q, Arg::Text(tenant.as_str()));
        q.push(" AND parts.session = v.session AND parts.message = v.message AND parts.id = v.id");
        let done = Postgres::execute(conn, &mut q).await.map_err(map)?;
        tally.statement(done.rows_affected());
    }
    Ok(())
}

/// The tag a query of `c` looks for: its session's, or its tenant's.
fn scope_tag(c: &Candidates<'_>) -> String {
    match c.session {
        Some(s) => session_tag(c.tenant, s.as_str()),
        None => tenant_tag(c.tenant),
    }
}

/// [`Dialect::search_candidates`].
pub(crate) fn candidates(c: &Candidates<'_>) -> QueryBuilder<Postgres> {
    if c.function {
        return through_function(c);
    }
    let config = regconfig(c.config);
    let words = c.words.join(" ");
    let mut q = QueryBuilder::new(format!(
        "SELECT p.body::text, p.checksum, p.id, h.score FROM (\
         SELECT session, message, id, ts_rank(search, plainto_tsquery({config}, "
    ));
    q.push_bind(words.clone());
    q.push(format_args!(
        "))::float8 AS score FROM parts WHERE search @@ (plainto_tsquery({config}, "
    ));
    q.push_bind(words);
    q.push(") && ");
    q.push_bind(scope_tag(c));
    q.push("::tsquery) AND tenant = ");
    Postgres::bind(&mut q, Arg::Text(c.tenant.as_str()));
    if let Some(s) = c.session {
        q.push(" AND session = ");
        Postgres::bind(&mut q, Arg::Id(s.as_str()));
    }
    q.push(format_args!(
        " ORDER BY score DESC, session, message, id LIMIT {} OFFSET {}) h \
         JOIN parts p ON p.tenant = ",
        c.limit, c.offset
    ));
    Postgres::bind(&mut q, Arg::Text(c.tenant.as_str()));
    q.push(" AND p.session = h.session AND p.message = h.message AND p.id = h.id");
    q
}

/// [`candidates`] through the schema's `search_candidates` function (see the module
/// docs).
fn through_function(c: &Candidates<'_>) -> QueryBuilder<Postgres> {
    let mut q =
        QueryBuilder::new("SELECT p.body::text, p.checksum, p.id, h.score FROM search_candidates(");
    q.push_bind(c.words.join(" "));
    q.push(", ");
    q.push_bind(scope_tag(c));
    q.push(", ");
    q.push_bind(c.session.map(|s| s.as_str().as_bytes()));
    q.push(", ");
    q.push_bind(i64::try_from(c.limit).unwrap_or(i64::MAX));
    q.push(", ");
    q.push_bind(i64::try_from(c.offset).unwrap_or(i64::MAX));
    q.push(") h JOIN parts p ON p.tenant = ");
    Postgres::bind(&mut q, Arg::Text(c.tenant.as_str()));
    q.push(" AND p.session = h.session AND p.message = h.message AND p.id = h.id");
    q
}

/// The statements that (re)create `search_candidates` for `config` in the schema and
/// grant it to the application role alone.
fn function_sql(options: &PostgresOptions, config: &str) -> String {
    let schema = super::schema::quoted(&options.schema);
    let role = super::schema::quoted(&options.app_role);
    let config = regconfig(config);
    let signature = format!("{schema}.search_candidates(text, text, bytea, bigint, bigint)");
    // PL/pgSQL's EXECUTE plans the query for the values at hand (a SQL function would
    // reuse a generic plan): the GIN index for a rare word, a parallel scan of the
    // tenant's rows for a word most parts hold.
    format!(
        "CREATE OR REPLACE FUNCTION {schema}.search_candidates(
            words text, tag text, only_session bytea, lim bigint, skip bigint)
         RETURNS TABLE (session bytea, message bytea, id bytea, score float8)
         LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, {schema}
         AS $fn$ BEGIN RETURN QUERY EXECUTE $q$
            SELECT p.session, p.message, p.id,
                   ts_rank(p.search, plainto_tsquery({config}, $1))::float8 AS score
            FROM {schema}.parts p
            WHERE p.tenant = current_setting('forge.tenant', true)
              AND p.search @@ (plainto_tsquery({config}, $1) && $2::tsquery)
              AND ($3 IS NULL OR p.session = $3)
            ORDER BY score DESC, p.session, p.message, p.id
            LIMIT $4 OFFSET $5
         $q$ USING words, tag, only_session, lim, skip; END $fn$;
         REVOKE ALL ON FUNCTION {signature} FROM PUBLIC;
         GRANT EXECUTE ON FUNCTION {signature} TO {role};"
    )
}

/// The server's name of text search configuration `language`.
///
/// # Errors
/// [`Error::InvalidInput`] naming the option when the server has no such
/// configuration.
async fn resolve(conn: &mut PgConnection, language: &str) -> Result<String> {
    // Looked up as the cast would (unquoted names fold to lowercase; an unqualified one
    // is found along the search path), without failing: a failed cast would abort the
    // migration's transaction.
    let lower = language.to_ascii_lowercase();
    let (schema, name) = lower.rsplit_once('.').unwrap_or(("", &lower));
    let found: Option<String> = sqlx::query_scalar(
        "SELECT c.oid::regconfig::text FROM pg_ts_config c \
         JOIN pg_namespace n ON n.oid = c.cfgnamespace \
         WHERE c.cfgname = $2 AND CASE WHEN $1 = '' \
             THEN n.nspname = ANY (current_schemas(true)) ELSE n.nspname = $1 END \
         ORDER BY array_position(current_schemas(true), n.nspname::text) LIMIT 1",
    )
    .bind(schema)
    .bind(name)
    .fetch_optional(&mut *conn)
    .await
    .map_err(map)?;
    found.ok_or_else(|| {
        Error::invalid(format!(
            "postgres option search_language={language:?} names no text search \
             configuration of the server (SELECT cfgname FROM pg_ts_config lists them; \
             the default is simple)"
        ))
    })
}

/// Brings the index to what `options` ask inside the connect's migration transaction
/// (`search_path` set to the schema): builds `parts.search` from the rows when it is
/// not kept with the configuration asked for (a schema of version 5, one connected to
/// with `search=off`, or with another `search_language`), drops it for `search=off`,
/// and records the state in `forge_meta`. Returns the configuration in use, `None` when
/// search is off.
///
/// The rows are read and updated by the connecting user: one bound by row-level security
/// (`privileged` false) sees no rows, so the policy of `parts` is lifted for this
/// transaction (`NO FORCE`: the owner, which that user must be to alter the table, is
/// exempt) and put back before it commits.
pub(crate) async fn sync(
    conn: &mut PgConnection,
    options: &PostgresOptions,
    privileged: bool,
) -> Result<Option<String>> {
    let kept: Option<(i64, Option<String>)> =
        sqlx::query_as("SELECT value, note FROM forge_meta WHERE key = 'search'")
            .fetch_optional(&mut *conn)
            .await
            .map_err(map)?;
    let want = if options.search {
        Some(resolve(conn, &options.search_language).await?)
    } else {
        None
    };
    // The configuration the column was built with; `None` when there is none.
    let built = match &kept {
        Some((1, note)) => note.clone(),
        _ => None,
    };
    let run = async |conn: &mut PgConnection, sql: &str| {
        sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
            .execute(&mut *conn)
            .await
            .map(|_| ())
            .map_err(map)
    };
    if kept.is_some() && built == want {
        if let (Some(config), true) = (&want, privileged) {
            // A schema indexed under a role bound by the policy has no function yet.
            let function: bool = sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n \
                 ON n.oid = p.pronamespace WHERE n.nspname = $1 \
                 AND p.proname = 'search_candidates')",
            )
            .bind(&options.schema)
            .fetch_one(&mut *conn)
            .await
            .map_err(map)?;
            if !function {
                run(conn, &function_sql(options, config)).await?;
            }
        }
        return Ok(want);
    }
    run(
        conn,
        "DROP FUNCTION IF EXISTS search_candidates(text, text, bytea, bigint, bigint)",
    )
    .await?;
    run(conn, "ALTER TABLE parts DROP COLUMN IF EXISTS search").await?;
    match &want {
        None => {
            if built.is_some() {
                tracing::info!(schema = %options.schema, "search=off: dropped the search index");
            }
        }
        Some(config) => {
            run(conn, "ALTER TABLE parts ADD COLUMN search tsvector").await?;
            if !privileged {
                run(conn, "ALTER TABLE parts NO FORCE ROW LEVEL SECURITY").await?;
            }
            let place = format!("Postgres schema {}", options.schema);
            let parts = crate::search::backfill::<Postgres>(conn, &place, config).await?;
            if !privileged {
                run(conn, "ALTER TABLE parts FORCE ROW LEVEL SECURITY").await?;
            }
            run(
                conn,
                "CREATE INDEX parts_search ON parts USING gin (search)",
            )
            .await?;
            if privileged {
                run(conn, &function_sql(options, config)).await?;
            }
            if kept.is_some() || parts > 0 {
                tracing::info!(
                    schema = %options.schema,
                    parts,
                    language = %config,
                    "search=on: built the search index from the rows"
                );
            }
        }
    }
    sqlx::query(
        "INSERT INTO forge_meta (key, value, note) VALUES ('search', $1, $2) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value, note = excluded.note",
    )
    .bind(i64::from(want.is_some()))
    .bind(want.as_deref())
    .execute(&mut *conn)
    .await
    .map_err(map)?;
    Ok(want)
}
