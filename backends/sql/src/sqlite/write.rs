//! The SQLite write path: inside the writer's `BEGIN IMMEDIATE` transaction, read the
//! facts the batch depends on, simulate it ([`crate::plan`]) and write its net effect
//! with one statement per table and chunk.

use forge_core::{Result, SessionId, TenantId};
use sqlx::{QueryBuilder, Row, Sqlite, SqliteConnection};

use crate::error::sqlite as map;
use crate::plan::{Loaded, Needs, StoredSession, TenantOps};
use crate::rows::seq_to_sql;
use crate::stats::Tally;
use crate::{id_from_sql, CHUNK_ROWS};

/// Reads what [`Needs`] lists.
pub(crate) async fn load(
    conn: &mut SqliteConnection,
    needs: &Needs,
    tally: &mut Tally,
) -> Result<Loaded> {
    let mut loaded = Loaded::default();
    for (tenant, ids) in &needs.sessions {
        let ids: Vec<&SessionId> = ids.iter().collect();
        for chunk in ids.chunks(CHUNK_ROWS) {
            let mut q =
                QueryBuilder::<Sqlite>::new("SELECT id, seq, body FROM sessions WHERE tenant = ");
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
                    seq: crate::rows::seq_from_sql(row.try_get(1).map_err(map)?),
                    body: row.try_get(2).map_err(map)?,
                };
                loaded
                    .sessions
                    .insert((tenant.clone(), id_from_sql(id)?), stored);
            }
        }
    }
    for (tenant, keys) in &needs.messages {
        let keys: Vec<_> = keys.iter().collect();
        for chunk in keys.chunks(CHUNK_ROWS) {
            let mut q =
                QueryBuilder::<Sqlite>::new("SELECT session, id FROM messages WHERE tenant = ");
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
    conn: &mut SqliteConnection,
    mut q: QueryBuilder<Sqlite>,
    tally: &mut Tally,
) -> Result<()> {
    let done = q.build().execute(&mut *conn).await.map_err(map)?;
    tally.statement(done.rows_affected());
    Ok(())
}

/// Writes one tenant's net changes: deletes, then upserts parents before children.
pub(crate) async fn write(
    conn: &mut SqliteConnection,
    tenant: &TenantId,
    ops: &TenantOps,
    tally: &mut Tally,
) -> Result<()> {
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
                .push_bind(s.body.as_str());
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
                .push_bind(m.body.as_str());
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
                .push_bind(p.body.as_str());
        });
        q.push(
            " ON CONFLICT (tenant, session, message, id) DO UPDATE SET open = excluded.open, \
             body = excluded.body",
        );
        run(conn, q, tally).await?;
    }
    Ok(())
}
