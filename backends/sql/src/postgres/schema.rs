//! The Postgres schema, its embedded migrations, and the application role.
//!
//! Ids are `bytea` (the UTF-8 bytes): bytea compares bytewise, which is the order of
//! Rust strings and so of ids, independent of any collation, and it carries any id, also
//! one with a NUL (which `text` cannot hold). Rows are `json`, not `jsonb`: jsonb rejects
//! `\u0000` inside strings (a tool output may hold one) and rewrites numbers, while
//! `json` keeps the exact text we wrote, still validated and usable with `->`/`->>`.
//!
//! Every table has row-level security enabled and forced, so it applies to the table
//! owner too. The tenant tables' policy admits exactly the rows whose `tenant` equals
//! the transaction's `forge.tenant` setting; with no setting no row is visible or
//! writable.

use forge_core::{Error, Result};
use sqlx::{AssertSqlSafe, PgConnection, Postgres, QueryBuilder, Row};

use super::config::PostgresOptions;
use crate::error::postgres as map;

/// The schema version this release writes and reads.
pub const SCHEMA_VERSION: i64 = 6;

/// Serializes migrations of every forge-store schema of the database (an advisory lock
/// key; any constant unlikely to be used by others).
pub(crate) const MIGRATION_LOCK: i64 = 0x666f_7267_655f_6d69; // "forge_mi"

/// Migration `n` (index `n - 1`) brings a schema from version `n - 1` to `n`. They run
/// with `search_path` set to the target schema.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE sessions (
    tenant  text COLLATE "C" NOT NULL,
    id      bytea  NOT NULL,
    seq     bigint NOT NULL,
    body    json   NOT NULL,
    PRIMARY KEY (tenant, id)
);

CREATE TABLE messages (
    tenant  text COLLATE "C" NOT NULL,
    session bytea   NOT NULL,
    id      bytea   NOT NULL,
    open    boolean NOT NULL,
    body    json    NOT NULL,
    PRIMARY KEY (tenant, session, id),
    FOREIGN KEY (tenant, session) REFERENCES sessions (tenant, id) ON DELETE CASCADE
);

CREATE INDEX messages_open ON messages (tenant, session, id) WHERE open;

CREATE TABLE parts (
    tenant  text COLLATE "C" NOT NULL,
    session bytea   NOT NULL,
    message bytea   NOT NULL,
    id      bytea   NOT NULL,
    open    boolean NOT NULL,
    body    json    NOT NULL,
    PRIMARY KEY (tenant, session, message, id),
    FOREIGN KEY (tenant, session, message)
        REFERENCES messages (tenant, session, id) ON DELETE CASCADE
);

CREATE INDEX parts_open ON parts (tenant, session, message, id) WHERE open;

ALTER TABLE sessions ENABLE ROW LEVEL SECURITY;
ALTER TABLE sessions FORCE ROW LEVEL SECURITY;
ALTER TABLE messages ENABLE ROW LEVEL SECURITY;
ALTER TABLE messages FORCE ROW LEVEL SECURITY;
ALTER TABLE parts ENABLE ROW LEVEL SECURITY;
ALTER TABLE parts FORCE ROW LEVEL SECURITY;

CREATE POLICY tenant_isolation ON sessions
    USING (tenant = current_setting('forge.tenant', true))
    WITH CHECK (tenant = current_setting('forge.tenant', true));
CREATE POLICY tenant_isolation ON messages
    USING (tenant = current_setting('forge.tenant', true))
    WITH CHECK (tenant = current_setting('forge.tenant', true));
CREATE POLICY tenant_isolation ON parts
    USING (tenant = current_setting('forge.tenant', true))
    WITH CHECK (tenant = current_setting('forge.tenant', true));
"#,
    r"
CREATE INDEX parts_by_id ON parts (tenant, session, id);
",
    // Version 3: every row's value carries its format and checksum (`crate::rows`).
    // `migrate` fills it in for the rows already there when its role sees them all.
    r"
ALTER TABLE sessions ADD COLUMN checksum bigint;
ALTER TABLE messages ADD COLUMN checksum bigint;
ALTER TABLE parts ADD COLUMN checksum bigint;
",
    // Version 4: fence records (`crate::fence`), apart from the sessions they fence,
    // under the same tenant policy. A schema upgraded to it has none: no session was
    // ever claimed.
    r#"
CREATE TABLE fences (
    tenant      text COLLATE "C" NOT NULL,
    session_id  bytea  NOT NULL,
    epoch       bigint NOT NULL,
    holder      text   NOT NULL,
    expires_ms  bigint NOT NULL,
    PRIMARY KEY (tenant, session_id)
);

ALTER TABLE fences ENABLE ROW LEVEL SECURITY;
ALTER TABLE fences FORCE ROW LEVEL SECURITY;

CREATE POLICY tenant_isolation ON fences
    USING (tenant = current_setting('forge.tenant', true))
    WITH CHECK (tenant = current_setting('forge.tenant', true));
"#,
    // Version 5: large values stored once (`crate::blobs`): the value, and apart from
    // it its length and when it was last written or refreshed (a refresh updates the
    // small row; the value's TOAST stays as it is). Same tenant policy.
    r#"
CREATE TABLE blobs (
    tenant  text COLLATE "C" NOT NULL,
    id      text COLLATE "C" NOT NULL,
    value   text NOT NULL,
    PRIMARY KEY (tenant, id)
);

CREATE TABLE blob_touched (
    tenant  text COLLATE "C" NOT NULL,
    id      text COLLATE "C" NOT NULL,
    bytes   bigint NOT NULL,
    touched bigint NOT NULL,
    PRIMARY KEY (tenant, id)
);

ALTER TABLE blobs ENABLE ROW LEVEL SECURITY;
ALTER TABLE blobs FORCE ROW LEVEL SECURITY;
ALTER TABLE blob_touched ENABLE ROW LEVEL SECURITY;
ALTER TABLE blob_touched FORCE ROW LEVEL SECURITY;

CREATE POLICY tenant_isolation ON blobs
    USING (tenant = current_setting('forge.tenant', true))
    WITH CHECK (tenant = current_setting('forge.tenant', true));
CREATE POLICY tenant_isolation ON blob_touched
    USING (tenant = current_setting('forge.tenant', true))
    WITH CHECK (tenant = current_setting('forge.tenant', true));
"#,
    // Version 6: full-text search (`super::search`). `forge_meta` gets a text column for
    // the text search configuration of the index; `migrate` adds `parts.search` and
    // builds it (`search=on`).
    r"
ALTER TABLE forge_meta ADD COLUMN note text;
",
];

const _: () = assert!(MIGRATIONS.len() as i64 == SCHEMA_VERSION);

/// Creates `forge_meta` (schema version 6 adds a `note` column): the schema version,
/// readable by everyone, written only by the role that creates it (RLS forced here too,
/// so the owner is bound by the policies).
const META: &str = r"
CREATE TABLE forge_meta (key text PRIMARY KEY, value bigint NOT NULL);
ALTER TABLE forge_meta ENABLE ROW LEVEL SECURITY;
ALTER TABLE forge_meta FORCE ROW LEVEL SECURITY;
CREATE POLICY forge_meta_read ON forge_meta FOR SELECT USING (true);
CREATE POLICY forge_meta_owner ON forge_meta TO CURRENT_USER USING (true) WITH CHECK (true);
";

/// What the migration learned about the connecting user, and set up.
pub(crate) struct Setup {
    /// The URL's user is a superuser or has `BYPASSRLS`: queries must run as the
    /// application role.
    pub privileged: bool,
    /// The text search configuration of the search index, `None` when search is off.
    pub search: Option<String>,
}

pub(crate) fn quoted(ident: &str) -> String {
    // Identifiers were checked to be plain; quoting keeps their case.
    format!("\"{ident}\"")
}

/// Whether `role` is a superuser or has `BYPASSRLS`; `None` when it does not exist.
async fn role_bypasses_rls(conn: &mut PgConnection, role: &str) -> Result<Option<bool>> {
    sqlx::query("SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = $1")
        .bind(role)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map)?
        .map(|r| r.try_get::<bool, _>(0))
        .transpose()
        .map_err(map)
}

/// Creates the schema if missing, checks its version, applies missing migrations,
/// builds or drops the search index as the options ask ([`super::search::sync`]) and,
/// for a privileged user, sets up the application role. One transaction, serialized
/// with every other forge-store migration of the database (advisory locks are per database).
///
/// # Errors
/// [`Error::Unsupported`] for a schema written by a newer version;
/// [`Error::InvalidInput`] for a schema holding other tables but no forge-store
/// version, or an application role that would bypass row-level security.
pub(crate) async fn migrate(conn: &mut PgConnection, options: &PostgresOptions) -> Result<Setup> {
    let schema = quoted(&options.schema);
    let role = quoted(&options.app_role);
    // READ COMMITTED whatever the server's `default_transaction_isolation`: each
    // statement after the lock must see what the previous holder committed. Under
    // REPEATABLE READ or SERIALIZABLE the snapshot would be taken by the lock statement,
    // before the wait, and a second process would try to create the schema again.
    let mut tx = sqlx::Connection::begin_with(&mut *conn, "BEGIN ISOLATION LEVEL READ COMMITTED")
        .await
        .map_err(map)?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *tx)
        .await
        .map_err(map)?;
    let privileged: bool =
        sqlx::query("SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user")
            .fetch_one(&mut *tx)
            .await
            .map_err(map)?
            .try_get(0)
            .map_err(map)?;

    // Looked up first: CREATE SCHEMA IF NOT EXISTS needs the CREATE privilege on the
    // database even when the schema exists.
    let schema_exists = sqlx::query("SELECT 1 FROM pg_namespace WHERE nspname = $1")
        .bind(&options.schema)
        .fetch_optional(&mut *tx)
        .await
        .map_err(map)?
        .is_some();
    if !schema_exists {
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
            .execute(&mut *tx)
            .await
            .map_err(map)?;
    }
    sqlx::raw_sql(AssertSqlSafe(format!("SET LOCAL search_path TO {schema}")))
        .execute(&mut *tx)
        .await
        .map_err(map)?;

    let mut tables = QueryBuilder::new("SELECT tablename::text FROM pg_tables WHERE schemaname = ");
    tables
        .push_bind(&options.schema)
        .push(" ORDER BY tablename");
    let place = format!("postgres schema {}", options.schema);
    let from =
        crate::schema::upgrade::<Postgres>(&mut tx, &place, tables, META, MIGRATIONS).await?;
    if (1..3).contains(&from) {
        if privileged {
            let filled = crate::schema::fill_checksums::<Postgres>(&mut tx).await?;
            tracing::info!(
                schema = %options.schema,
                rows = filled,
                "upgraded from schema version {from}: computed the checksum of every row"
            );
        } else {
            tracing::warn!(
                schema = %options.schema,
                "upgraded from schema version {from} as a role bound by row-level \
                 security: rows already stored keep no checksum (read unverified) until \
                 written again; upgrade as a superuser or a BYPASSRLS role to checksum them"
            );
        }
    }

    if privileged {
        if role_bypasses_rls(&mut tx, &options.app_role)
            .await?
            .is_none()
        {
            // Roles are server-wide, but the migration lock above is per database: a
            // forge-store migrating another database of the server may create the role
            // at the same time. The loser of that race waits for the winner's commit and
            // gets a unique violation, which is the outcome it wanted: the role exists.
            sqlx::raw_sql(AssertSqlSafe(format!(
                "DO $$ BEGIN CREATE ROLE {role} NOLOGIN; \
                 EXCEPTION WHEN unique_violation OR duplicate_object THEN NULL; END $$"
            )))
            .execute(&mut *tx)
            .await
            .map_err(map)?;
        }
        if role_bypasses_rls(&mut tx, &options.app_role).await? == Some(true) {
            return Err(Error::invalid(format!(
                "postgres application role {} is a superuser or has BYPASSRLS, so \
                 row-level security would not apply to it; use a plain role",
                options.app_role
            )));
        }
        sqlx::raw_sql(AssertSqlSafe(format!(
            "GRANT USAGE ON SCHEMA {schema} TO {role};
             GRANT SELECT, INSERT, UPDATE, DELETE ON sessions, messages, parts, fences, blobs, blob_touched TO {role};
             GRANT SELECT ON forge_meta TO {role};"
        )))
        .execute(&mut *tx)
        .await
        .map_err(map)?;
    }
    // After the role exists: the search function is granted to it.
    let search = super::search::sync(&mut tx, options, privileged).await?;
    tx.commit().await.map_err(map)?;
    Ok(Setup { privileged, search })
}
