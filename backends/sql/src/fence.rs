//! Fence records of both SQL backends ([`forge_core::fence`]): table `fences`, one row
//! per `(tenant, session_id)`, apart from the session's rows (no foreign key: a session
//! may be claimed before it exists, and its record outlives its deletion).
//!
//! A claim or release is one transaction on a writer connection
//! ([`Backend::fence_conn`]) that first shuts out every other `apply`, claim and release
//! of the session ([`Backend::lock_fence`]), then reads the record, decides and writes
//! it. `apply` reads the records of its sessions in its own transaction, under the same
//! exclusion ([`crate::write`]), so a claim is either committed before a batch reads the
//! record or waits until the batch has committed.

use forge_core::fence::{self, Claim, ClaimRequest};
use forge_core::{Error, Result, SessionId, TenantId};
use sqlx::{QueryBuilder, SqlSafeStr, Transaction};

use crate::dialect::{Arg, Backend, Dialect};
use crate::id_from_sql;

/// The columns of a fence record, as [`decode`] reads them.
pub(crate) const COLUMNS: &str = "session_id, epoch, holder, expires_ms";

/// The fence record in columns `i..i + 4` of `row` ([`COLUMNS`]), with its session.
pub(crate) fn decode<D: Dialect>(
    row: &D::Row,
    i: usize,
    place: &str,
    tenant: &TenantId,
) -> Result<(SessionId, Claim)> {
    let session: SessionId = id_from_sql(D::bytes(row, i).map_err(D::map)?)?;
    let epoch = D::int(row, i + 1).map_err(D::map)?;
    let claim = Claim {
        // Epoch 0 is never granted: a row that says so was not written here.
        epoch: u64::try_from(epoch)
            .ok()
            .filter(|e| *e > 0)
            .ok_or_else(|| {
                Error::corrupted(
                    place,
                    format!(
                        "the fence record of session {session} of tenant {tenant} holds \
                         epoch {epoch}, which is never granted"
                    ),
                )
            })?,
        holder: D::text(row, i + 2).map_err(D::map)?,
        expires_ms: D::int(row, i + 3).map_err(D::map)?,
    };
    Ok((session, claim))
}

/// The fence records of `sessions` of `tenant` that exist, in one statement.
pub(crate) async fn read<D: Dialect>(
    conn: &mut D::Connection,
    place: &str,
    tenant: &TenantId,
    sessions: &[&SessionId],
) -> Result<Vec<(SessionId, Claim)>> {
    let mut q = QueryBuilder::new(format!("SELECT {COLUMNS} FROM fences WHERE tenant = "));
    D::bind(&mut q, Arg::Text(tenant.as_str()));
    q.push(" AND session_id IN (");
    D::push_tuples(&mut q, sessions, |s| [Arg::Id(s.as_str())]);
    q.push(")");
    let rows = D::fetch(conn, &mut q).await.map_err(D::map)?;
    rows.iter()
        .map(|row| decode::<D>(row, 0, place, tenant))
        .collect()
}

/// An epoch as the `bigint` column holds it.
fn epoch_to_sql(session: &SessionId, epoch: u64) -> Result<i64> {
    i64::try_from(epoch).map_err(|_| {
        Error::invalid(format!(
            "session {session}: epoch {epoch} is past the largest one a SQL store keeps ({})",
            i64::MAX
        ))
    })
}

/// Writes `record` as the fence record of `session` of `tenant`.
async fn write<D: Dialect>(
    conn: &mut D::Connection,
    tenant: &TenantId,
    session: &SessionId,
    record: &Claim,
) -> Result<()> {
    let mut q = QueryBuilder::new(
        "INSERT INTO fences (tenant, session_id, epoch, holder, expires_ms) VALUES ",
    );
    D::push_tuple(
        &mut q,
        [
            Arg::Text(tenant.as_str()),
            Arg::Id(session.as_str()),
            Arg::Int(epoch_to_sql(session, record.epoch)?),
            Arg::Text(&record.holder),
            Arg::Int(record.expires_ms),
        ],
    );
    q.push(
        " ON CONFLICT (tenant, session_id) DO UPDATE SET epoch = excluded.epoch, \
         holder = excluded.holder, expires_ms = excluded.expires_ms",
    );
    D::execute(conn, &mut q).await.map_err(D::map)?;
    Ok(())
}

/// Reads the fence record of `session`, lets `decide` say what to store (and what to
/// return), stores it, and commits: one transaction, durable when it returns.
async fn change<B: Backend, T: Send>(
    b: &B,
    tenant: &TenantId,
    session: &SessionId,
    decide: impl FnOnce(Option<&Claim>) -> Result<(Option<Claim>, T)> + Send,
) -> Result<T> {
    let mut conn = b.fence_conn().await?;
    let out = async {
        let begin = SqlSafeStr::into_sql_str(B::BEGIN_FENCE);
        let mut tx = Transaction::<B::Db>::begin(&mut *conn, Some(begin))
            .await
            .map_err(B::Db::map)?;
        let decided = async {
            b.lock_fence(&mut tx, tenant, session).await?;
            let current = read::<B::Db>(&mut tx, b.place(), tenant, &[session])
                .await?
                .pop()
                .map(|(_, claim)| claim);
            let (store, out) = decide(current.as_ref())?;
            if let Some(record) = store.filter(|r| current.as_ref() != Some(r)) {
                write::<B::Db>(&mut tx, tenant, session, &record).await?;
            }
            Ok::<_, Error>(out)
        }
        .await;
        match decided {
            Ok(out) => {
                tx.commit().await.map_err(B::Db::map)?;
                Ok(out)
            }
            Err(e) => {
                // The decision's error is what the caller needs; the connection rolls
                // back anyway when the transaction is dropped.
                let _ = tx.rollback().await;
                Err(e)
            }
        }
    }
    .await;
    b.fence_conn_done(conn).await;
    out
}

/// [`forge_core::Store::claim`].
pub(crate) async fn claim<B: Backend>(
    b: &B,
    tenant: &TenantId,
    session: &SessionId,
    request: &ClaimRequest,
) -> Result<Claim> {
    // A bad request is refused before any lock is taken.
    request.validate()?;
    change(b, tenant, session, |current| {
        let claim = fence::decide(session, current, request)?;
        Ok((Some(claim.clone()), claim))
    })
    .await
}

/// [`forge_core::Store::release`].
pub(crate) async fn release<B: Backend>(
    b: &B,
    tenant: &TenantId,
    session: &SessionId,
    epoch: u64,
) -> Result<()> {
    change(b, tenant, session, |current| {
        Ok((fence::released(current, epoch), ()))
    })
    .await
}

/// [`forge_core::Store::claimed`].
pub(crate) async fn claimed<B: Backend>(
    b: &B,
    tenant: &TenantId,
    session: &SessionId,
) -> Result<Option<Claim>> {
    let mut conn = b.reader(tenant, false).await?;
    let found = read::<B::Db>(&mut conn, b.place(), tenant, &[session]).await?;
    conn.finish().await.map_err(B::Db::map)?;
    Ok(found.into_iter().next().map(|(_, claim)| claim))
}
