//! Session locks of the Postgres write path: batches on one session run one after the
//! other, also across processes.

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

/// The advisory lock key of a session's batches in `schema`.
pub(crate) fn session_key(schema: &str, tenant: &TenantId, session: &SessionId) -> i64 {
    fnv1a(&[
        schema.as_bytes(),
        tenant.as_str().as_bytes(),
        session.as_str().as_bytes(),
    ])
}

/// Takes a transaction-scoped advisory lock per session of the batch, in key order.
///
/// Every batch touching a session holds its lock until commit, so batches on one session
/// run one after the other and each reads what the previous one committed (the
/// simulation's facts stay true until its writes). Locks are taken before anything else
/// and in one global order, so two batches cannot deadlock on them. Sessions that hash
/// alike only wait for each other.
pub(crate) async fn lock_sessions(
    conn: &mut PgConnection,
    schema: &str,
    needs: &Needs,
    tally: &mut Tally,
) -> Result<()> {
    let mut keys: Vec<i64> = needs
        .sessions
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
