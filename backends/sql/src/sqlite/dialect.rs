//! SQLite's side of [`crate::dialect`]: JSON rows are `TEXT`, and the tenant is a key
//! column only.

use async_trait::async_trait;
use forge_core::{Error, Result, Tenancy, TenantId};
use sqlx::error::DatabaseError;
use sqlx::sqlite::SqliteQueryResult;
use sqlx::{QueryBuilder, Sqlite, SqliteConnection};

use crate::dialect::Dialect;
use crate::plan::PartRow;
use crate::search::Candidates;
use crate::stats::Tally;

/// `SQLITE_FULL`, in the words the user looks for.
#[derive(Debug)]
struct DiskFull {
    source: sqlx::Error,
}

impl std::fmt::Display for DiskFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no space left on the device, or the file is too large (SQLite: {})",
            self.source
        )
    }
}

impl std::error::Error for DiskFull {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

#[async_trait]
impl Dialect for Sqlite {
    const BACKEND: &'static str = "sqlite";
    const TENANCY: Tenancy = Tenancy::Keyed;
    const BODY: &'static str = "body";
    const JSON_CAST: &'static str = "";
    /// The migration to schema 3 computes every checksum: a NULL is never valid.
    const UNCHECKED_ROWS: bool = false;
    /// SQLite keeps the key in the file next to the value, with no checksum of its own.
    const KEY_CHECKED: bool = true;
    /// FTS5 tables of their own ([`super::search`]).
    const SEARCH_IN_ROW: bool = false;

    /// `SQLITE_BUSY` / `SQLITE_LOCKED` (and their extended codes): another process holds
    /// the file's write lock longer than the busy timeout.
    fn retryable(err: &dyn DatabaseError) -> bool {
        // Extended result codes keep the primary code in the low byte.
        let primary = err
            .code()
            .and_then(|c| c.parse::<i32>().ok())
            .map(|c| c & 0xff);
        matches!(primary, Some(5 | 6))
    }

    /// As [`crate::error::map`], except that `SQLITE_CORRUPT` ("database disk image is
    /// malformed") and `SQLITE_NOTADB` ("file is not a database") are
    /// [`Error::Corrupted`], keeping SQLite's error as the source.
    fn map(err: sqlx::Error) -> Error {
        if let sqlx::Error::ColumnDecode { .. } = &err {
            // Every value in the file was written by this backend as what the read
            // expects (e.g. UTF-8 text): one that does not decode was damaged.
            return Error::corrupted_with(
                "SQLite database",
                "a stored value does not decode: the file is damaged",
                err,
            );
        }
        if let sqlx::Error::Database(db) = &err {
            let code = db.code().and_then(|c| c.parse::<i32>().ok());
            let primary = code.map(|c| c & 0xff);
            if primary == Some(13) {
                return Error::backend(Self::BACKEND, false, DiskFull { source: err });
            }
            let what = match (primary, code) {
                (Some(11), _) => {
                    "the database file is damaged (SQLite: database disk image is malformed)"
                }
                (Some(26), _) => {
                    "not a forge-store SQLite database (SQLite: file is not a database)"
                }
                // SQLITE_IOERR_SHORT_READ: a page number in the file points past its end
                // (a damaged FTS5 segment of the search index reads so).
                (_, Some(522)) => {
                    "the database file is damaged (SQLite: a read past the end of the file)"
                }
                _ => return crate::error::map::<Self>(err),
            };
            return Error::corrupted_with("SQLite database", what, err);
        }
        crate::error::map::<Self>(err)
    }

    fn rows_affected(done: &SqliteQueryResult) -> u64 {
        done.rows_affected()
    }

    async fn index_parts(
        conn: &mut SqliteConnection,
        tenant: &TenantId,
        rows: &[PartRow],
        _config: &str,
        tally: &mut Tally,
    ) -> Result<()> {
        super::search::index_parts(conn, tenant, rows, tally).await
    }

    fn search_candidates(c: &Candidates<'_>) -> QueryBuilder<Sqlite> {
        super::search::candidates(c)
    }
}
