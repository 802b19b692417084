//! Session locks of the Postgres write path: batches, claims and releases of one session
//! run one after the other, also across processes.
//!
//! A session's lock is a transaction-scoped advisory lock (`pg_advisory_xact_lock`,
//! exclusive) whose key is [`session_key`]: FNV-1a (64 bits) of the schema, tenant and
//! session names, each followed by a separator byte. The key is stable across processes
//! and releases; two sessions whose keys collide only wait for each other. Advisory
//! locks live in shared memory and write no WAL.

use forge_core::{Result, SessionId, TenantId};
use sqlx::PgConnection;

use crate::error::postgres as map;
use crate::plan::Needs;
use crate::stats::Tally;

/// FNV-1a, 64 bits: stable across processes and releases, unlike `std`'s hasher.
fn fnv1a(parts: &[&[u8]]) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        // A separator, so ("ab", "c") and ("a", "bc") differ.
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h as i64
}

/// The advisory lock key of a session's batches, claims and releases in `schema`.
pub(crate) fn session_key(schema: &str, tenant: &TenantId, session: &SessionId) -> i64 {
    fnv1a(&[
        schema.as_bytes(),
        tenant.as_str().as_bytes(),
        session.as_str().as_bytes(),
    ])
}

/// Takes a transaction-scoped advisory lock per session of the batch (the session of
/// every event, [`Needs::fences`]), in key order.
///
/// Every batch touching a session holds its lock until commit, so batches on one session
/// run one after the other and each reads what the previous one committed (the
/// simulation's facts stay true until its writes). A claim or release of the session
/// takes the same lock ([`lock_fence`]), so no claim commits between the batch's read of
/// the fence record and its commit, and a claim that returned is seen by every batch
/// that locks after it. Locks are taken before anything else and in one global order, so
/// two batches cannot deadlock on them (a claim takes one lock only). Sessions that hash
/// alike only wait for each other.
pub(crate) async fn lock_sessions(
    conn: &mut PgConnection,
    schema: &str,
    needs: &Needs,
    tally: &mut Tally,
) -> Result<()> {
    let mut keys: Vec<i64> = needs
        .fences
        .iter()
        .flat_map(|(t, ids)| ids.iter().map(move |s| session_key(schema, t, s)))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    for key in keys {
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(key)
            .execute(&mut *conn)
            .await
            .map_err(map)?;
        tally.statement(0);
    }
    Ok(())
}

/// Starts the transaction of a claim or release of `session`, in one statement: sets
/// `tenant` (row-level security), makes the commit wait for the WAL flush even where
/// `synchronous_commit` is `off` (a claim lost in a crash would let epochs go back; any
/// stronger setting stays), and takes the session's lock.
pub(crate) async fn lock_fence(
    conn: &mut PgConnection,
    schema: &str,
    tenant: &TenantId,
    session: &SessionId,
) -> Result<()> {
    sqlx::query(
        "SELECT set_config('forge.tenant', $1, true), \
         set_config('synchronous_commit', \
             CASE current_setting('synchronous_commit') \
                 WHEN 'off' THEN 'on' ELSE current_setting('synchronous_commit') END, \
             true), \
         pg_advisory_xact_lock($2)",
    )
    .bind(tenant.as_str())
    .bind(session_key(schema, tenant, session))
    .execute(&mut *conn)
    .await
    .map_err(map)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::fnv1a;

    #[test]
    fn lock_keys_are_stable_and_separate_their_parts() {
        // Pinned: the key must not change between releases (two versions of the store
        // may run side by side during a rollout and must lock the same keys).
        assert_eq!(
            fnv1a(&[b"public", b"default", b"ses_1"]),
            1_842_845_643_897_812_133
        );
        assert_ne!(fnv1a(&[b"ab", b"c"]), fnv1a(&[b"a", b"bc"]));
        assert_eq!(fnv1a(&[]), 0xcbf2_9ce4_8422_2325_u64 as i64);
    }
}
