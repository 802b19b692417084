//! Large values stored once ([`forge_core::blob`]), in both SQL backends: table `blobs`
//! holds each value, `blob_touched` its length and when it was last written or
//! refreshed, both keyed by `(tenant, id)` (on Postgres under the tenant policy).
//!
//! A put reads `blob_touched` first and writes only when a blob is absent or stale, in
//! one transaction of its own (durable when it returns). A delete decides "untouched
//! since" and deletes in one statement per table, in one transaction.

use std::collections::BTreeSet;
use std::sync::Arc;

use forge_core::blob::{BlobEntry, BlobId, BlobValue};
use forge_core::{Error, Result, TenantId};
use sqlx::QueryBuilder;

use crate::dialect::{Arg, Backend, Dialect, SqlDb};

/// Ids as bound text.
fn id_args(ids: &[BlobId]) -> Vec<&str> {
    ids.iter().map(BlobId::as_str).collect()
}

/// The `touched` times of those of `ids` that are stored.
async fn touched<B: Backend>(b: &B, tenant: &TenantId, ids: &[&str]) -> Result<Vec<(String, i64)>> {
    let mut reader = b.reader(tenant, false).await?;
    let mut q = QueryBuilder::new("SELECT id, touched FROM blob_touched WHERE tenant = ");
    B::Db::bind(&mut q, Arg::Text(tenant.as_str()));
    q.push(" AND id IN (");
    B::Db::push_tuples(&mut q, ids, |id| [Arg::Text(id)]);
    q.push(")");
    let rows = B::Db::fetch(&mut reader, &mut q)
        .await
        .map_err(B::Db::map)?;
    reader.finish().await.map_err(B::Db::map)?;
    rows.iter()
        .map(|r| {
            Ok((
                B::Db::text(r, 0).map_err(B::Db::map)?,
                B::Db::int(r, 1).map_err(B::Db::map)?,
            ))
        })
        .collect()
}

/// [`forge_core::Store::put_blobs`].
pub(crate) async fn put<B: Backend>(
    b: &B,
    tenant: &TenantId,
    blobs: &[BlobValue],
    now_ms: i64,
    refresh_before_ms: i64,
) -> Result<u64> {
    if blobs.is_empty() {
        return Ok(0);
    }
    let ids: Vec<&str> = blobs.iter().map(|v| v.id.as_str()).collect();
    let known = touched(b, tenant, &ids).await?;
    let fresh: BTreeSet<&str> = known
        .iter()
        .filter(|(_, t)| *t >= refresh_before_ms)
        .map(|(id, _)| id.as_str())
        .collect();
    let stored: BTreeSet<&str> = known.iter().map(|(id, _)| id.as_str()).collect();
    let write: Vec<&BlobValue> = blobs
        .iter()
        .filter(|v| !fresh.contains(v.id.as_str()))
        .collect();
    if write.is_empty() {
        return Ok(0);
    }
    let mut tx = b.begin_write().await?;
    B::Db::set_tenant(&mut tx, tenant).await?;
    let new: Vec<&&BlobValue> = write
        .iter()
        .filter(|v| !stored.contains(v.id.as_str()))
        .collect();
    if !new.is_empty() {
        let mut q = QueryBuilder::new("INSERT INTO blobs (tenant, id, value) VALUES ");
        B::Db::push_tuples(&mut q, &new, |v| {
            [
                Arg::Text(tenant.as_str()),
                Arg::Text(v.id.as_str()),
                Arg::Text(&v.value),
            ]
        });
        q.push(" ON CONFLICT (tenant, id) DO NOTHING");
        B::Db::execute(&mut tx, &mut q).await.map_err(B::Db::map)?;
    }
    let lens: Vec<(&str, i64)> = write
        .iter()
        .map(|v| {
            (
                v.id.as_str(),
                i64::try_from(v.value.len()).unwrap_or(i64::MAX),
            )
        })
        .collect();
    let mut q = QueryBuilder::new("INSERT INTO blob_touched (tenant, id, bytes, touched) VALUES ");
    B::Db::push_tuples(&mut q, &lens, |(id, len)| {
        [
            Arg::Text(tenant.as_str()),
            Arg::Text(id),
            Arg::Int(*len),
            Arg::Int(now_ms),
        ]
    });
    q.push(" ON CONFLICT (tenant, id) DO UPDATE SET touched = excluded.touched");
    B::Db::execute(&mut tx, &mut q).await.map_err(B::Db::map)?;
    tx.commit().await.map_err(B::Db::map)?;
    Ok(write.len() as u64)
}

/// [`forge_core::Store::blobs`].
pub(crate) async fn get<B: Backend>(
    b: &B,
    tenant: &TenantId,
    ids: &[BlobId],
) -> Result<Vec<Option<Arc<str>>>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let args = id_args(ids);
    let mut reader = b.reader(tenant, false).await?;
    let mut q = QueryBuilder::new("SELECT id, value FROM blobs WHERE tenant = ");
    B::Db::bind(&mut q, Arg::Text(tenant.as_str()));
    q.push(" AND id IN (");
    B::Db::push_tuples(&mut q, &args, |id| [Arg::Text(id)]);
    q.push(")");
    let rows = B::Db::fetch(&mut reader, &mut q)
        .await
        .map_err(B::Db::map)?;
    reader.finish().await.map_err(B::Db::map)?;
    let mut found = std::collections::HashMap::new();
    for r in &rows {
        let id = B::Db::text(r, 0).map_err(B::Db::map)?;
        let value = B::Db::text(r, 1).map_err(B::Db::map)?;
        if BlobId::of(&value).as_str() != id {
            return Err(Error::corrupted(
                format!("{} blob {tenant}/{id}", b.place()),
                "its value does not match its address",
            ));
        }
        found.insert(id, Arc::<str>::from(value));
    }
    Ok(ids
        .iter()
        .map(|id| found.get(id.as_str()).cloned())
        .collect())
}

/// [`forge_core::Store::blob_list`].
pub(crate) async fn list<B: Backend>(b: &B, tenant: &TenantId) -> Result<Vec<BlobEntry>> {
    let mut reader = b.reader(tenant, false).await?;
    let mut q = QueryBuilder::new("SELECT id, bytes, touched FROM blob_touched WHERE tenant = ");
    B::Db::bind(&mut q, Arg::Text(tenant.as_str()));
    q.push(" ORDER BY id");
    let rows = B::Db::fetch(&mut reader, &mut q)
        .await
        .map_err(B::Db::map)?;
    reader.finish().await.map_err(B::Db::map)?;
    rows.iter()
        .map(|r| {
            Ok(BlobEntry {
                id: BlobId::parse(&B::Db::text(r, 0).map_err(B::Db::map)?)?,
                bytes: u64::try_from(B::Db::int(r, 1).map_err(B::Db::map)?).unwrap_or(0),
                touched_ms: B::Db::int(r, 2).map_err(B::Db::map)?,
            })
        })
        .collect()
}

/// [`forge_core::Store::delete_blobs`].
pub(crate) async fn delete<B: Backend>(
    b: &B,
    tenant: &TenantId,
    ids: &[BlobId],
    touched_before_ms: i64,
) -> Result<u64> {
    if ids.is_empty() {
        return Ok(0);
    }
    let args = id_args(ids);
    let mut tx = b.begin_write().await?;
    B::Db::set_tenant(&mut tx, tenant).await?;
    let mut q = QueryBuilder::new("DELETE FROM blob_touched WHERE tenant = ");
    B::Db::bind(&mut q, Arg::Text(tenant.as_str()));
    q.push(" AND touched < ");
    B::Db::bind(&mut q, Arg::Int(touched_before_ms));
    q.push(" AND id IN (");
    B::Db::push_tuples(&mut q, &args, |id| [Arg::Text(id)]);
    q.push(") RETURNING id");
    let rows = B::Db::fetch(&mut tx, &mut q).await.map_err(B::Db::map)?;
    let gone: Vec<String> = rows
        .iter()
        .map(|r| B::Db::text(r, 0).map_err(B::Db::map))
        .collect::<Result<_>>()?;
    if !gone.is_empty() {
        let mut q = QueryBuilder::new("DELETE FROM blobs WHERE tenant = ");
        B::Db::bind(&mut q, Arg::Text(tenant.as_str()));
        q.push(" AND id IN (");
        B::Db::push_tuples(&mut q, &gone, |id| [Arg::Text(id)]);
        q.push(")");
        B::Db::execute(&mut tx, &mut q).await.map_err(B::Db::map)?;
    }
    tx.commit().await.map_err(B::Db::map)?;
    Ok(gone.len() as u64)
}
