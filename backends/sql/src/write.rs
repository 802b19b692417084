//! The write path of both SQL backends: inside one transaction per batch, read the facts
//! the batch depends on (its sessions' fence records among them), check every event's
//! epoch, simulate the batch ([`crate::plan`]) and write its net effect with one
//! statement per table and chunk, setting the tenant (row-level security) only when it
//! changes.
//!
//! With search on, the part upsert writes each part's search index entry too
//! ([`crate::search`]): on Postgres as the row's `search` column, in the same statement;
//! on SQLite with statements of their own right after it. Removals and overwrites reach
//! the index without a statement here: on Postgres the entry is part of its row, on
//! SQLite triggers on `parts` remove it when its row is deleted (also by a cascade) or
//! rewritten.
//!
//! The fence records are read after [`Backend::before_load`] and in the same
//! transaction as the writes: on SQLite that transaction holds the database's write lock
//! from its `BEGIN IMMEDIATE`; on Postgres `before_load` takes the advisory lock of every
//! session of the batch, which claims take too. So no claim commits between the read
//! and the batch's commit. Reading them writes nothing.

use forge_core::{Envelope, Result, SessionId, SyncEvent, TenantId};
use sqlx::{Database, QueryBuilder};

use crate::dialect::{Arg, Backend, Dialect};
use crate::plan::{Batch, Loaded, Needs, PartRow, StoredSession, TenantOps};
use crate::rows::{self, seq_from_sql, seq_to_sql, Origin};
use crate::stats::Tally;
use crate::{id_from_sql, CHUNK_ROWS};

/// Applies one batch in one transaction: all of it or, on an error, nothing.
pub(crate) async fn apply<B: Backend>(b: &B, batch: &[Envelope<SyncEvent>]) -> Result<()> {
    let search = b.search_config();
    let batch = Batch::prepare(batch, search.is_some());
    if batch.is_empty() {
        return Ok(());
    }
    let needs = batch.needs();
    let mut tally = Tally::default();
    let mut tx = b.begin_write().await?;
    let written = async {
        b.before_load(&mut tx, &needs, &mut tally).await?;
        let mut writer = Writer::<B::Db> {
            conn: &mut tx,
            tenant: None,
            tally: &mut tally,
            place: b.place(),
            search,
        };
        let loaded = writer.load(&needs).await?;
        batch.check_fences(&loaded)?;
        let plan = batch.simulate(&loaded)?;
        for (tenant, ops) in &plan.tenants {
            writer.write(tenant, ops).await?;
        }
        Ok::<_, forge_core::Error>(())
    }
    .await;
    if let Err(e) = written {
        // The batch's error is what the caller needs; a failed rollback would only
        // hide it (and the connection rolls back when it returns to the pool).
        let _ = tx.rollback().await;
        return Err(e);
    }
    tx.commit().await.map_err(B::Db::map)?;
    b.counters().commit(&tally);
    Ok(())
}

/// The first column of a row of [`Writer::load`]'s first statement: a fence record.
const FENCE_ROW: i64 = 1;
/// … or a session row.
const SESSION_ROW: i64 = 0;

/// One write transaction's connection, its tenant setting and its tally.
struct Writer<'a, D: Database> {
    conn: &'a mut D::Connection,
    /// The tenant set in the transaction, set again only when it changes.
    tenant: Option<TenantId>,
    tally: &'a mut Tally,
    /// The database, named in verification errors.
    place: &'a str,
    /// The search index's configuration, `None` when search is off.
    search: Option<&'a str>,
}

impl<D: Dialect> Writer<'_, D> {
    /// Makes `tenant` the transaction's tenant.
    async fn switch(&mut self, tenant: &TenantId) -> Result<()> {
        if self.tenant.as_ref() != Some(tenant) {
            if D::set_tenant(self.conn, tenant).await? {
                self.tally.statement(0);
            }
            self.tenant = Some(tenant.clone());
        }
        Ok(())
    }

    async fn fetch(&mut self, mut q: QueryBuilder<D>) -> Result<Vec<D::Row>> {
        let rows = D::fetch(self.conn, &mut q).await.map_err(D::map)?;
        self.tally.statement(0);
        Ok(rows)
    }

    /// The rows `select` (`SELECT … FROM <table> WHERE tenant = `) finds of `tenant`
    /// whose `(session, id)` is one of `keys`.
    async fn fetch_keyed<I: AsRef<str>>(
        &mut self,
        select: &'static str,
        tenant: &TenantId,
        keys: &[&(SessionId, I)],
    ) -> Result<Vec<D::Row>> {
        let mut q = QueryBuilder::new(select);
        D::bind(&mut q, Arg::Text(tenant.as_str()));
        q.push(" AND (session, id) IN (");
        D::push_tuples(&mut q, keys, |(s, id)| {
            [Arg::Id(s.as_str()), Arg::Id(id.as_ref())]
        });
        q.push(")");
        self.fetch(q).await
    }

    async fn run(&mut self, mut q: QueryBuilder<D>) -> Result<()> {
        let done = D::execute(self.conn, &mut q).await.map_err(D::map)?;
        self.tally.statement(D::rows_affected(&done));
        Ok(())
    }

    /// Reads what [`Needs`] lists, tenant by tenant.
    async fn load(&mut self, needs: &Needs) -> Result<Loaded> {
        let mut loaded = Loaded::default();
        // Every tenant with sessions to look up has fence records to look up too, and
        // every tenant with messages to look up has sessions to look up.
        for (tenant, fenced) in &needs.fences {
            self.switch(tenant).await?;
            let sessions = needs.sessions.get(tenant);
            let fenced: Vec<_> = fenced.iter().collect();
            let at = Origin {
                place: self.place,
                table: "sessions",
                tenant: tenant.as_str(),
                unchecked_ok: D::UNCHECKED_ROWS,
                key_checked: D::KEY_CHECKED,
            };
            for chunk in fenced.chunks(CHUNK_ROWS) {
                // One statement for both: the fence records of the chunk, then the rows
                // of its sessions that matter (columns of the same types in both).
                let ids: Vec<&SessionId> = chunk
                    .iter()
                    .copied()
                    .filter(|s| sessions.is_some_and(|set| set.contains(*s)))
                    .collect();
                let mut q = QueryBuilder::new(format!(
                    "SELECT CAST({FENCE_ROW} AS BIGINT), {} FROM fences WHERE tenant = ",
                    crate::fence::COLUMNS
                ));
                D::bind(&mut q, Arg::Text(tenant.as_str()));
                q.push(" AND session_id IN (");
                D::push_tuples(&mut q, chunk, |id| [Arg::Id(id.as_str())]);
                q.push(")");
                if !ids.is_empty() {
                    q.push(format_args!(
                        " UNION ALL SELECT CAST({SESSION_ROW} AS BIGINT), id, seq, {}, checksum \
                         FROM sessions WHERE tenant = ",
                        D::BODY
                    ));
                    D::bind(&mut q, Arg::Text(tenant.as_str()));
                    q.push(" AND id IN (");
                    D::push_tuples(&mut q, &ids, |id| [Arg::Id(id.as_str())]);
                    q.push(")");
                }
                for row in self.fetch(q).await? {
                    if D::int(&row, 0).map_err(D::map)? == FENCE_ROW {
                        let (id, claim) = crate::fence::decode::<D>(&row, 1, self.place, tenant)?;
                        loaded
                            .fences
                            .entry(tenant.clone())
                            .or_default()
                            .insert(id, claim);
                        continue;
                    }
                    let id = D::bytes(&row, 1).map_err(D::map)?;
                    let body = D::text(&row, 3).map_err(D::map)?;
                    // The row may be written back (a new seq): a damaged one must not
                    // get a fresh checksum.
                    rows::verify(&body, D::opt_int(&row, 4).map_err(D::map)?, &id, &at)?;
                    let stored = StoredSession {
                        seq: seq_from_sql(D::int(&row, 2).map_err(D::map)?),
                        body,
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
                let select = "SELECT session, id FROM messages WHERE tenant = ";
                for row in self.fetch_keyed(select, tenant, chunk).await? {
                    let s = id_from_sql(D::bytes(&row, 0).map_err(D::map)?)?;
                    let m = id_from_sql(D::bytes(&row, 1).map_err(D::map)?)?;
                    loaded.messages.insert((tenant.clone(), s, m));
                }
            }
        }
        for (tenant, keys) in &needs.parts {
            self.switch(tenant).await?;
            let keys: Vec<_> = keys.iter().collect();
            for chunk in keys.chunks(CHUNK_ROWS) {
                let select = "SELECT session, id, message FROM parts WHERE tenant = ";
                for row in self.fetch_keyed(select, tenant, chunk).await? {
                    let s = id_from_sql(D::bytes(&row, 0).map_err(D::map)?)?;
                    let p = id_from_sql(D::bytes(&row, 1).map_err(D::map)?)?;
                    let m = id_from_sql(D::bytes(&row, 2).map_err(D::map)?)?;
                    loaded
                        .part_messages
                        .entry((tenant.clone(), s, p))
                        .or_default()
                        .push(m);
                }
            }
        }
        Ok(loaded)
    }

    /// `DELETE FROM <table> WHERE tenant = <t> AND <key> IN (<chunk>)`, chunk by chunk.
    async fn delete<'a, T, const N: usize>(
        &mut self,
        table: &str,
        key: &str,
        tenant: &TenantId,
        rows: &'a [T],
        tuple: impl Fn(&'a T) -> [Arg<'a>; N] + Copy,
    ) -> Result<()> {
        self.run_chunked(rows, |chunk| {
            let mut q = QueryBuilder::new(format!("DELETE FROM {table} WHERE tenant = "));
            D::bind(&mut q, Arg::Text(tenant.as_str()));
            q.push(format_args!(" AND {key} IN ("));
            D::push_tuples(&mut q, chunk, tuple);
            q.push(")");
            q
        })
        .await
    }

    /// `INSERT INTO <into> VALUES … ON CONFLICT <conflict>`, chunk by chunk. Every key
    /// of `rows` is distinct (one statement cannot update a row twice).
    async fn upsert<'a, T, const N: usize>(
        &mut self,
        into: &str,
        conflict: &str,
        rows: &'a [T],
        tuple: impl Fn(&'a T) -> [Arg<'a>; N] + Copy,
    ) -> Result<()> {
        self.run_chunked(rows, |chunk| {
            let mut q = QueryBuilder::new(format!("INSERT INTO {into} VALUES "));
            D::push_tuples(&mut q, chunk, tuple);
            q.push(format_args!(" ON CONFLICT {conflict}"));
            q
        })
        .await
    }

    /// Runs the statement `build` makes of each chunk of [`CHUNK_ROWS`] of `rows`, in
    /// order.
    async fn run_chunked<'a, T>(
        &mut self,
        rows: &'a [T],
        build: impl Fn(&'a [T]) -> QueryBuilder<D>,
    ) -> Result<()> {
        for chunk in rows.chunks(CHUNK_ROWS) {
            self.run(build(chunk)).await?;
        }
        Ok(())
    }

    /// Writes one tenant's net changes: deletes, then upserts parents before children.
    async fn write(&mut self, tenant: &TenantId, ops: &TenantOps) -> Result<()> {
        self.switch(tenant).await?;
        self.delete("sessions", "id", tenant, &ops.delete_sessions, |id| {
            [Arg::Id(id.as_str())]
        })
        .await?;
        self.delete(
            "messages",
            "(session, id)",
            tenant,
            &ops.delete_messages,
            |(s, m)| [Arg::Id(s.as_str()), Arg::Id(m.as_str())],
        )
        .await?;
        let key = "(session, message, id)";
        self.delete("parts", key, tenant, &ops.delete_parts, |(s, m, p)| {
            [
                Arg::Id(s.as_str()),
                Arg::Id(m.as_str()),
                Arg::Id(p.as_str()),
            ]
        })
        .await?;
        let t = Arg::Text(tenant.as_str());
        self.upsert(
            "sessions (tenant, id, seq, body, checksum)",
            "(tenant, id) DO UPDATE SET seq = excluded.seq, body = excluded.body, \
             checksum = excluded.checksum",
            &ops.put_sessions,
            |s| {
                [
                    t,
                    Arg::Id(s.id.as_str()),
                    Arg::Int(seq_to_sql(s.seq)),
                    Arg::Json(&s.body),
                    Arg::Int(rows::checksum(&s.body)),
                ]
            },
        )
        .await?;
        self.upsert(
            "messages (tenant, session, id, open, body, checksum)",
            "(tenant, session, id) DO UPDATE SET open = excluded.open, body = excluded.body, \
             checksum = excluded.checksum",
            &ops.put_messages,
            |m| {
                let (s, id) = (m.session.as_str(), m.id.as_str());
                [
                    t,
                    Arg::Id(s),
                    Arg::Id(id),
                    Arg::Bool(m.open),
                    Arg::Json(&m.body),
                    Arg::Int(rows::checksum(&m.body)),
                ]
            },
        )
        .await?;
        self.put_parts(tenant, &ops.put_parts).await
    }

    /// Upserts parts, with their search index entries when search is on.
    async fn put_parts(&mut self, tenant: &TenantId, parts: &[PartRow]) -> Result<()> {
        const COLUMNS: &str = "parts (tenant, session, message, id, open, body, checksum";
        const UPDATE: &str = "(tenant, session, message, id) DO UPDATE SET open = excluded.open, \
                              body = excluded.body, checksum = excluded.checksum";
        let t = tenant.as_str();
        let tuple = |p| part_tuple(t, p);
        match self.search {
            None => {
                self.upsert(&format!("{COLUMNS})"), UPDATE, parts, tuple)
                    .await
            }
            Some(config) if D::SEARCH_IN_ROW => {
                self.run_chunked(parts, |chunk| {
                    let mut q =
                        QueryBuilder::new(format!("INSERT INTO {COLUMNS}, search) VALUES "));
                    for (i, p) in chunk.iter().enumerate() {
                        q.push(if i == 0 { "(" } else { ", (" });
                        for arg in tuple(p) {
                            D::bind(&mut q, arg);
                            q.push(", ");
                        }
                        D::push_search(&mut q, tenant, p, config);
                        q.push(")");
                    }
                    q.push(format_args!(
                        " ON CONFLICT {UPDATE}, search = excluded.search"
                    ));
                    q
                })
                .await
            }
            Some(config) => {
                self.upsert(&format!("{COLUMNS})"), UPDATE, parts, tuple)
                    .await?;
                D::index_parts(self.conn, tenant, parts, config, self.tally).await
            }
        }
    }
}

/// The columns of a part row, as [`Writer::put_parts`] writes them.
fn part_tuple<'a>(tenant: &'a str, p: &'a PartRow) -> [Arg<'a>; 7] {
    let (s, m, id) = (p.session.as_str(), p.message.as_str(), p.id.as_str());
    let (open, body) = (Arg::Bool(p.open), Arg::Json(&p.body));
    let check = Arg::Int(rows::checksum(&p.body));
    [
        Arg::Text(tenant),
        Arg::Id(s),
        Arg::Id(m),
        Arg::Id(id),
        open,
        body,
        check,
    ]
}
