//! The SQLite schema and its embedded migrations.
//!
//! Ids are stored as BLOBs of their UTF-8 bytes: BLOBs compare with `memcmp`, which is
//! the order of Rust strings (and so of ids), and they carry any id, also one with a NUL.
//! Tables are `WITHOUT ROWID`, clustered on their key, so a session's messages and a
//! message's parts sit together and a page of history is one range of the primary key.

use std::path::Path;

use forge_core::Result;
use sqlx::{QueryBuilder, Sqlite, SqliteConnection};

/// The schema version this release writes and reads.
pub const SCHEMA_VERSION: i64 = 6;

/// Migration `n` (index `n - 1`) brings a database from version `n - 1` to `n`.
const MIGRATIONS: &[&str] = &[
    r"
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
",
    r"
CREATE INDEX parts_by_id ON parts (tenant, session, id);
",
    // Version 3: every row's value carries its format and checksum (`crate::rows`);
    // `migrate` fills the column in for the rows already there.
    r"
ALTER TABLE sessions ADD COLUMN checksum INTEGER;
ALTER TABLE messages ADD COLUMN checksum INTEGER;
ALTER TABLE parts ADD COLUMN checksum INTEGER;
",
    // Version 4: fence records (`crate::fence`), apart from the sessions they fence.
    // A database upgraded to it has none: no session was ever claimed.
    r"
CREATE TABLE fences (
    tenant      TEXT    NOT NULL,
    session_id  BLOB    NOT NULL,
    epoch       INTEGER NOT NULL,
    holder      TEXT    NOT NULL,
    expires_ms  INTEGER NOT NULL,
    PRIMARY KEY (tenant, session_id)
) STRICT, WITHOUT ROWID;
",
    // Version 5: large values stored once (`crate::blobs`). The value in a rowid table
    // (a large row lives in overflow pages); its length and when it was last written or
    // refreshed apart, so a refresh rewrites a small row, not the value.
    r"
CREATE TABLE blobs (
    tenant  TEXT NOT NULL,
    id      TEXT NOT NULL,
    value   TEXT NOT NULL,
    PRIMARY KEY (tenant, id)
) STRICT;

CREATE TABLE blob_touched (
    tenant  TEXT    NOT NULL,
    id      TEXT    NOT NULL,
    bytes   INTEGER NOT NULL,
    touched INTEGER NOT NULL,
    PRIMARY KEY (tenant, id)
) STRICT, WITHOUT ROWID;
",
    // Version 6: the full-text search index (`super::search`), empty until `migrate`
    // builds it (`search=on`). A part's entry goes when its row is deleted (removals,
    // moves, the cascades of message removals and session deletions) or rewritten:
    // the write path only adds the entries of the rows it wrote.
    r"
CREATE TABLE search_docs (
    doc     INTEGER PRIMARY KEY,
    tenant  TEXT NOT NULL,
    session BLOB NOT NULL,
    message BLOB NOT NULL,
    part    BLOB NOT NULL,
    UNIQUE (tenant, session, message, part)
) STRICT;

CREATE VIRTUAL TABLE search USING fts5(
    scope, text, content = '', contentless_delete = 1, tokenize = 'ascii'
);

CREATE TRIGGER parts_unindex AFTER DELETE ON parts BEGIN
    DELETE FROM search WHERE rowid = (
        SELECT doc FROM search_docs WHERE tenant = old.tenant AND session = old.session
            AND part = old.id AND message = old.message
    );
    DELETE FROM search_docs WHERE tenant = old.tenant AND session = old.session
        AND part = old.id AND message = old.message;
END;

CREATE TRIGGER parts_reindex AFTER UPDATE ON parts BEGIN
    DELETE FROM search WHERE rowid = (
        SELECT doc FROM search_docs WHERE tenant = old.tenant AND session = old.session
            AND part = old.id AND message = old.message
    );
    DELETE FROM search_docs WHERE tenant = old.tenant AND session = old.session
        AND part = old.id AND message = old.message;
END;
",
];

const _: () = assert!(MIGRATIONS.len() as i64 == SCHEMA_VERSION);

/// Creates `forge_meta`, which holds the schema version.
const META: &str = "CREATE TABLE forge_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) STRICT";

/// Checks the schema version and applies the missing migrations, then builds or drops
/// the search index as `search` asks ([`super::search::sync`]), inside the caller's
/// write transaction (see [`crate::schema::upgrade`]).
pub(crate) async fn migrate(conn: &mut SqliteConnection, path: &Path, search: bool) -> Result<()> {
    let tables = QueryBuilder::new(
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
         ORDER BY name",
    );
    let place = format!("SQLite database {}", path.display());
    let from = crate::schema::upgrade::<Sqlite>(conn, &place, tables, META, MIGRATIONS).await?;
    if (1..3).contains(&from) {
        let filled = crate::schema::fill_checksums::<Sqlite>(conn).await?;
        tracing::info!(
            file = %path.display(),
            rows = filled,
            "upgraded from schema version {from}: computed the checksum of every row"
        );
    }
    super::search::sync(conn, path, search).await
}
