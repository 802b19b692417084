//! The Postgres write path: lock the batch's sessions, read the facts the batch depends
//! on, simulate it ([`crate::plan`]) and write its net effect with one statement per
//! table and chunk, switching the tenant setting between tenants.

use forge_core::{Result, SessionId, TenantId};
use sqlx::{PgConnection, Postgres, QueryBuilder, Row};

use crate::error::postgres as map;
use crate::plan::{Loaded, Needs, StoredSession, TenantOps};
use crate::rows::{seq_from_sql, seq_to_sql};
use crate::stats::Tally;
use crate::{id_from_sql, CHUNK_ROWS};

/// Sets the tenant the row-level security policies admit, for the rest of the
/// transaction (`is_local = true`).
pub(crate) async fn set_tenant(conn: &mut PgConnection, tenant: &TenantId) -> Result<()> {
    sqlx::query("SELECT set_config('forge.tenant', $1, true)")
        .bind(tenant.as_str())
        .execute(&mut *conn)
        .await
        .map_err(map)?;
    Ok(())
}

/// The tenant setting of the current transaction, set again only when it changes.
#[derive(Default)]
pub(crate) struct TenantSetting(Option<TenantId>);

impl TenantSetting {
    /// Makes `tenant` the transaction's tenant.
    pub async fn switch(
        &mut self,
        conn: &mut PgConnection,
        tenant: &TenantId,
        tally: &mut Tally,
    ) -> Result<()> {
        if self.0.as_ref() != Some(tenant) {
            set_tenant(conn, tenant).await?;
            tally.statement(0);
            self.0 = Some(tenant.clone());
        }
        Ok(())
    }
}

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
        .flat_map(|(t, ids)| {
            ids.iter().map(move |s| {
                fnv1a(&[
                    schema.as_bytes(),
                    t.as_str().as_bytes(),
                    s.as_str().as_bytes(),
                ])
            })
        })
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

/// Reads what [`Needs`] lists, tenant by tenant.
pub(crate) async fn load(
    conn: &mut PgConnection,
    setting: &mut TenantSetting,
    needs: &Needs,
    tally: &mut Tally,
) -> Result<Loaded> {
    let mut loaded = Loaded::default();
    for (tenant, ids) in &needs.sessions {
        setting.switch(conn, tenant, tally).await?;
        let ids: Vec<&SessionId> = ids.iter().collect();
        for chunk in ids.chunks(CHUNK_ROWS) {
            let mut q = QueryBuilder::<Postgres>::new(
                "SELECT id, seq, body::text FROM sessions WHERE tenant = ",
            );
            q.push_bind(tenant.as_str()).push(" AND id IN (");
            let mut list = q.separated(", ");
            for id in chunk {
                list.push_bind(id.as_str().as_bytes());
            }
            q.push(")");
            let rows = q.build().fetch_all(&mut *conn).await.map_err(map)?;
            tally.statement(0);
            for row in rows {
                let id: Vec<u8> = row.try_get(0).map_err(map)?;
                let stored = StoredSession {
                    seq: seq_from_sql(row.try_get(1).map_err(map)?),
                    body: row.try_get(2).map_err(map)?,
                };
                loaded
                    .sessions
                    .insert((tenant.clone(), id_from_sql(id)?), stored);
            }
        }
        let Some(keys) = needs.messages.get(tenant) else {
            continue;
        };
        let keys: Vec<_> = keys.iter().collect();
        for chunk in keys.chunks(CHUNK_ROWS) {
            let mut q =
                QueryBuilder::<Postgres>::new("SELECT session, id FROM messages WHERE tenant = ");
            q.push_bind(tenant.as_str()).push(" AND (session, id) IN (");
            q.push_values(chunk, |mut row, (s, m)| {
                row.push_bind(s.as_str().as_bytes())
                    .push_bind(m.as_str().as_bytes());
            });
            q.push(")");
            let rows = q.build().fetch_all(&mut *conn).await.map_err(map)?;
            tally.statement(0);
            for row in rows {
                let s: Vec<u8> = row.try_get(0).map_err(map)?;
                let m: Vec<u8> = row.try_get(1).map_err(map)?;
                loaded
                    .messages
                    .insert((tenant.clone(), id_from_sql(s)?, id_from_sql(m)?));
            }
        }
    }
    Ok(loaded)
}

async fn run(
    conn: &mut PgConnection,
    mut q: QueryBuilder<Postgres>,
    tally: &mut Tally,
) -> Result<()> {
    let done = q.build().execute(&mut *conn).await.map_err(map)?;
    tally.statement(done.rows_affected());
    Ok(())
}

/// Writes one tenant's net changes under its tenant setting: deletes, then upserts
/// parents before children.
pub(crate) async fn write(
    conn: &mut PgConnection,
    setting: &mut TenantSetting,
    tenant: &TenantId,
    ops: &TenantOps,
    tally: &mut Tally,
) -> Result<()> {
    setting.switch(conn, tenant, tally).await?;
    let t = tenant.as_str();
    for chunk in ops.delete_sessions.chunks(CHUNK_ROWS) {
        let mut q = QueryBuilder::new("DELETE FROM sessions WHERE tenant = ");
        q.push_bind(t).push(" AND id IN (");
        let mut list = q.separated(", ");
        for id in chunk {
            list.push_bind(id.as_str().as_bytes());
        }
        q.push(")");
        run(conn, q, tally).await?;
    }
    for chunk in ops.delete_messages.chunks(CHUNK_ROWS) {
        let mut q = QueryBuilder::new("DELETE FROM messages WHERE tenant = ");
        q.push_bind(t).push(" AND (session, id) IN (");
        q.push_values(chunk, |mut row, (s, m)| {
            row.push_bind(s.as_str().as_bytes())
                .push_bind(m.as_str().as_bytes());
        });
        q.push(")");
        run(conn, q, tally).await?;
    }
    for chunk in ops.delete_parts.chunks(CHUNK_ROWS) {
        let mut q = QueryBuilder::new("DELETE FROM parts WHERE tenant = ");
        q.push_bind(t).push(" AND (session, message, id) IN (");
        q.push_values(chunk, |mut row, (s, m, p)| {
            row.push_bind(s.as_str().as_bytes())
                .push_bind(m.as_str().as_bytes())
                .push_bind(p.as_str().as_bytes());
        });
        q.push(")");
        run(conn, q, tally).await?;
    }
    for chunk in ops.put_sessions.chunks(CHUNK_ROWS) {
        let mut q = QueryBuilder::new("INSERT INTO sessions (tenant, id, seq, body) ");
        q.push_values(chunk, |mut row, s| {
            row.push_bind(t)
                .push_bind(s.id.as_str().as_bytes())
                .push_bind(seq_to_sql(s.seq))
                .push_bind(s.body.as_str())
                .push_unseparated("::json");
        });
        q.push(" ON CONFLICT (tenant, id) DO UPDATE SET seq = excluded.seq, body = excluded.body");
        run(conn, q, tally).await?;
    }
    for chunk in ops.put_messages.chunks(CHUNK_ROWS) {
        let mut q = QueryBuilder::new("INSERT INTO messages (tenant, session, id, open, body) ");
        q.push_values(chunk, |mut row, m| {
            row.push_bind(t)
                .push_bind(m.session.as_str().as_bytes())
                .push_bind(m.id.as_str().as_bytes())
                .push_bind(m.open)
                .push_bind(m.body.as_str())
                .push_unseparated("::json");
        });
        q.push(
            " ON CONFLICT (tenant, session, id) DO UPDATE SET open = excluded.open, body = excluded.body",
        );
        run(conn, q, tally).await?;
    }
    for chunk in ops.put_parts.chunks(CHUNK_ROWS) {
        let mut q =
            QueryBuilder::new("INSERT INTO parts (tenant, session, message, id, open, body) ");
        q.push_values(chunk, |mut row, p| {
            row.push_bind(t)
                .push_bind(p.session.as_str().as_bytes())
                .push_bind(p.message.as_str().as_bytes())
                .push_bind(p.id.as_str().as_bytes())
                .push_bind(p.open)
                .push_bind(p.body.as_str())
                .push_unseparated("::json");
        });
        q.push(
            " ON CONFLICT (tenant, session, message, id) DO UPDATE SET open = excluded.open, \
             body = excluded.body",
        );
        run(conn, q, tally).await?;
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
