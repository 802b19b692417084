//! The SQLite schema and its embedded migrations.
//!
//! Ids are stored as BLOBs of their UTF-8 bytes: BLOBs compare with `memcmp`, which is
//! the order of Rust strings (and so of ids), and they carry any id, also one with a NUL.
//! Tables are `WITHOUT ROWID`, clustered on their key, so a session's messages and a
//! message's parts sit together and a page of history is one range of the primary key.

use std::path::Path;

use forge_core::{Error, Result};
use sqlx::{Row, SqliteConnection};

use crate::error::sqlite as map;

/// The schema version this release writes and reads.
pub const SCHEMA_VERSION: i64 = 1;

/// Migration `n` (index `n - 1`) brings a database from version `n - 1` to `n`.
const MIGRATIONS: &[&str] = &[r"
CREATE TABLE sessions (
    tenant  TEXT    NOT NULL,
    id      BLOB    NOT NULL,
    seq     INTEGER NOT NULL,
    body    TEXT    NOT NULL,
    PRIMARY KEY (tenant, id)
) STRICT, WITHOUT ROWID;

CREATE TABLE messages (
    tenant  TEXT    NOT NULL,
    session BLOB    NOT NULL,
    id      BLOB    NOT NULL,
    open    INTEGER NOT NULL CHECK (open IN (0, 1)),
    body    TEXT    NOT NULL,
    PRIMARY KEY (tenant, session, id),
    FOREIGN KEY (tenant, session) REFERENCES sessions (tenant, id) ON DELETE CASCADE
) STRICT, WITHOUT ROWID;

CREATE INDEX messages_open ON messages (tenant, session, id) WHERE open;

CREATE TABLE parts (
    tenant  TEXT    NOT NULL,
    session BLOB    NOT NULL,
    message BLOB    NOT NULL,
    id      BLOB    NOT NULL,
    open    INTEGER NOT NULL CHECK (open IN (0, 1)),
    body    TEXT    NOT NULL,
    PRIMARY KEY (tenant, session, message, id),
    FOREIGN KEY (tenant, session, message)
        REFERENCES messages (tenant, session, id) ON DELETE CASCADE
) STRICT, WITHOUT ROWID;

CREATE INDEX parts_open ON parts (tenant, session, message, id) WHERE open;
"];

const _: () = assert!(MIGRATIONS.len() as i64 == SCHEMA_VERSION);

/// Checks the schema version and applies the missing migrations, inside the caller's
/// write transaction.
///
/// # Errors
/// [`Error::Unsupported`] when the file was written by a newer schema version;
/// [`Error::InvalidInput`] when it holds tables but no forge-store version (someone
/// else's database).
pub(crate) async fn migrate(conn: &mut SqliteConnection, path: &Path) -> Result<()> {
    let tables: Vec<String> = sqlx::query(
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
         ORDER BY name",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(map)?
    .iter()
    .map(|r| r.try_get::<String, _>(0))
    .collect::<Result<_, _>>()
    .map_err(map)?;

    let version = if tables.iter().any(|t| t == "forge_meta") {
        sqlx::query("SELECT value FROM forge_meta WHERE key = 'schema_version'")
            .fetch_optional(&mut *conn)
            .await
            .map_err(map)?
            .map(|r| r.try_get::<i64, _>(0))
            .transpose()
            .map_err(map)?
            .unwrap_or(0)
    } else if tables.is_empty() {
        sqlx::query(
            "CREATE TABLE forge_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) STRICT",
        )
        .execute(&mut *conn)
        .await
        .map_err(map)?;
        0
    } else {
        return Err(Error::invalid(format!(
            "{} is a SQLite database without a forge-store schema version (tables: {}); \
             refusing to use it",
            path.display(),
            tables.join(", ")
        )));
    };

    if version > SCHEMA_VERSION {
        return Err(Error::Unsupported(format!(
            "{} has forge-store schema version {version}; this release reads up to version \
             {SCHEMA_VERSION} (written by a newer forge-store?)",
            path.display()
        )));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        sqlx::raw_sql(*sql).execute(&mut *conn).await.map_err(map)?;
        sqlx::query(
            "INSERT INTO forge_meta (key, value) VALUES ('schema_version', ?) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )
        .bind(i as i64 + 1)
        .execute(&mut *conn)
        .await
        .map_err(map)?;
    }
    Ok(())
}
