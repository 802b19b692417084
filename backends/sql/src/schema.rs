//! Schema versions, kept alike by both dialects: table `forge_meta` holds the version,
//! and migration `n` (index `n - 1`) brings a database from version `n - 1` to `n`.

use forge_core::{Error, Result};
use sqlx::QueryBuilder;

use crate::dialect::{Arg, Dialect};

/// Checks the schema version and applies the missing `migrations`, inside the caller's
/// transaction. `place` names the database in errors; `tables` lists the names of the
/// tables it holds; `meta` creates `forge_meta` in an empty one. Returns the version
/// the database had (0: it was empty).
///
/// # Errors
/// [`Error::Unsupported`] when the database was written by a newer schema version;
/// [`Error::InvalidInput`] when it holds tables but no forge-store version (someone
/// else's database).
pub(crate) async fn upgrade<D: Dialect>(
    conn: &mut D::Connection,
    place: &str,
    mut tables: QueryBuilder<D>,
    meta: &'static str,
    migrations: &[&'static str],
) -> Result<i64> {
    let tables = D::fetch(conn, &mut tables)
        .await
        .map_err(D::map)?
        .iter()
        .map(|r| D::text(r, 0))
        .collect::<Result<Vec<_>, _>>()
        .map_err(D::map)?;
    let version = if tables.iter().any(|t| t == "forge_meta") {
        let mut q = QueryBuilder::new("SELECT value FROM forge_meta WHERE key = 'schema_version'");
        let rows = D::fetch(conn, &mut q).await.map_err(D::map)?;
        match rows.first() {
            Some(row) => D::int(row, 0).map_err(D::map)?,
            None => 0,
        }
    } else if tables.is_empty() {
        D::execute_raw(conn, meta).await.map_err(D::map)?;
        0
    } else {
        return Err(Error::invalid(format!(
            "{place} holds tables but no forge-store schema version ({}); refusing to use it",
            tables.join(", ")
        )));
    };
    let latest = migrations.len() as i64;
    if version > latest {
        return Err(Error::Unsupported(format!(
            "{place} has forge-store schema version {version}; this release reads up to \
             version {latest} (written by a newer forge-store?)"
        )));
    }
    for (i, sql) in migrations.iter().enumerate().skip(version as usize) {
        D::execute_raw(conn, sql).await.map_err(D::map)?;
        let mut q =
            QueryBuilder::new("INSERT INTO forge_meta (key, value) VALUES ('schema_version', ");
        D::bind(&mut q, Arg::Int(i as i64 + 1));
        q.push(") ON CONFLICT (key) DO UPDATE SET value = excluded.value");
        D::execute(conn, &mut q).await.map_err(D::map)?;
    }
    Ok(version)
}

/// Computes the `checksum` column of every row that has none (rows written before
/// schema version 3), table by table, inside the caller's transaction. The caller's
/// connection must see every tenant's rows (on Postgres: a role row-level security does
/// not bind). Returns how many rows it filled in.
pub(crate) async fn fill_checksums<D: Dialect>(conn: &mut D::Connection) -> Result<u64> {
    let mut filled = 0;
    for (table, ids) in [
        ("sessions", &["id"][..]),
        ("messages", &["session", "id"][..]),
        ("parts", &["session", "message", "id"][..]),
    ] {
        let mut q = QueryBuilder::new(format!(
            "SELECT {}, tenant, {} FROM {table} WHERE checksum IS NULL",
            D::BODY,
            ids.join(", ")
        ));
        let rows = D::fetch(conn, &mut q).await.map_err(D::map)?;
        for row in &rows {
            let body = D::text(row, 0).map_err(D::map)?;
            let tenant = D::text(row, 1).map_err(D::map)?;
            let mut q = QueryBuilder::new(format!("UPDATE {table} SET checksum = "));
            D::bind(&mut q, Arg::Int(crate::rows::checksum(&body)));
            q.push(" WHERE tenant = ");
            D::bind(&mut q, Arg::Text(&tenant));
            for (i, column) in ids.iter().enumerate() {
                let id: String = crate::id_from_sql(D::bytes(row, i + 2).map_err(D::map)?)?;
                q.push(format_args!(" AND {column} = "));
                D::bind(&mut q, Arg::Id(&id));
            }
            D::execute(conn, &mut q).await.map_err(D::map)?;
            filled += 1;
        }
    }
    Ok(filled)
}
