//! The read path of both SQL backends: every query filters on the tenant (row-level
//! security, where the dialect has it, admits the same rows again), and a read of
//! several statements runs in one snapshot.

use forge_core::store::clamp_limit;
use forge_core::{
    Capabilities, Cursor, MessageId, MessageWithParts, OpenItems, Page, Part, Result, SearchKind,
    SessionId, SessionPage, SessionState, TenantId,
};
use sqlx::{Database, QueryBuilder};

use crate::dialect::{Arg, Backend, Dialect};
use crate::rows::{self, Origin};

/// A backend's capabilities.
pub(crate) fn capabilities<B: Backend>(b: &B) -> Capabilities {
    let mut caps = Capabilities::new(B::Db::BACKEND);
    caps.tenancy = B::Db::TENANCY;
    caps.blobs = true;
    caps.search = if b.search_config().is_some() {
        SearchKind::Index
    } else {
        SearchKind::Off
    };
    caps
}

/// `SELECT <columns> FROM <table> WHERE tenant = <tenant>`, to go on from.
fn select<D: Dialect>(columns: &str, table: &str, tenant: &TenantId) -> QueryBuilder<D> {
    let mut q = QueryBuilder::new(format!("SELECT {columns} FROM {table} WHERE tenant = "));
    D::bind(&mut q, Arg::Text(tenant.as_str()));
    q
}

/// Pushes ` AND <column> = <value>`.
fn and<D: Dialect>(q: &mut QueryBuilder<D>, column: &str, value: Arg<'_>) {
    q.push(format_args!(" AND {column} = "));
    D::bind(q, value);
}

/// The columns a checked read selects: the JSON, its checksum and the row's `key`
/// column (named in errors).
fn checked<D: Dialect>(key: &str) -> String {
    format!("{}, checksum, {key}", D::BODY)
}

/// Where a read of `table` looks, for verification errors.
pub(crate) fn origin<'a, D: Dialect>(
    place: &'a str,
    table: &'a str,
    tenant: &'a TenantId,
) -> Origin<'a> {
    Origin {
        place,
        table,
        tenant: tenant.as_str(),
        unchecked_ok: D::UNCHECKED_ROWS,
        key_checked: D::KEY_CHECKED,
    }
}

/// Runs `q`, whose columns `i`, `i + 1`, `i + 2` are [`checked`]'s, and returns every
/// row's JSON, verified.
async fn bodies<D: Dialect>(
    conn: &mut D::Connection,
    mut q: QueryBuilder<D>,
    i: usize,
    at: &Origin<'_>,
) -> Result<Vec<String>> {
    let rows = D::fetch(conn, &mut q).await.map_err(D::map)?;
    rows.iter()
        .map(|r| {
            let body = D::text(r, i).map_err(D::map)?;
            let check = D::opt_int(r, i + 1).map_err(D::map)?;
            let key = D::bytes(r, i + 2).map_err(D::map)?;
            rows::verify(&body, check, &key, at)?;
            Ok(body)
        })
        .collect()
}

async fn session_states<D: Dialect>(
    conn: &mut D::Connection,
    tenant: &TenantId,
    place: &str,
    mut q: QueryBuilder<D>,
) -> Result<Vec<SessionState>> {
    let at = origin::<D>(place, "sessions", tenant);
    let rows = D::fetch(conn, &mut q).await.map_err(D::map)?;
    rows.iter()
        .map(|r| {
            let seq = D::int(r, 0).map_err(D::map)?;
            let body = D::text(r, 1).map_err(D::map)?;
            let check = D::opt_int(r, 2).map_err(D::map)?;
            let key = D::bytes(r, 3).map_err(D::map)?;
            rows::verify(&body, check, &key, &at)?;
            rows::session_state(tenant.as_str(), seq, &body)
        })
        .collect()
}

pub(crate) async fn session<B: Backend>(
    b: &B,
    tenant: &TenantId,
    id: &SessionId,
) -> Result<Option<SessionState>> {
    let mut conn = b.reader(tenant, false).await?;
    let columns = format!("seq, {}", checked::<B::Db>("id"));
    let mut q = select::<B::Db>(&columns, "sessions", tenant);
    and(&mut q, "id", Arg::Id(id.as_str()));
    let mut out = session_states(&mut *conn, tenant, b.place(), q).await?;
    conn.finish().await.map_err(B::Db::map)?;
    Ok(out.pop())
}

pub(crate) async fn sessions<B: Backend>(b: &B, tenant: &TenantId) -> Result<Vec<SessionState>> {
    let mut conn = b.reader(tenant, false).await?;
    let columns = format!("seq, {}", checked::<B::Db>("id"));
    let mut q = select::<B::Db>(&columns, "sessions", tenant);
    q.push(" ORDER BY id");
    let out = session_states(&mut *conn, tenant, b.place(), q).await?;
    conn.finish().await.map_err(B::Db::map)?;
    Ok(out)
}

/// A page of a tenant's sessions after `after`, in id order: one more row than the
/// page is read to know whether more follow.
pub(crate) async fn sessions_after<B: Backend>(
    b: &B,
    tenant: &TenantId,
    after: Option<&SessionId>,
    limit: usize,
) -> Result<SessionPage> {
    let limit = clamp_limit(limit);
    let mut conn = b.reader(tenant, false).await?;
    let columns = format!("seq, {}", checked::<B::Db>("id"));
    let mut q = select::<B::Db>(&columns, "sessions", tenant);
    if let Some(a) = after {
        q.push(" AND id > ");
        B::Db::bind(&mut q, Arg::Id(a.as_str()));
    }
    q.push(format_args!(" ORDER BY id LIMIT {}", limit + 1));
    let mut sessions = session_states(&mut *conn, tenant, b.place(), q).await?;
    conn.finish().await.map_err(B::Db::map)?;
    let more = sessions.len() > limit;
    sessions.truncate(limit);
    let next = more
        .then(|| sessions.last().map(|s| s.info.id.clone()))
        .flatten();
    Ok(SessionPage { sessions, next })
}

/// The parts of messages `first..=last` of a session, by message and id.
async fn parts_of<D: Dialect>(
    conn: &mut D::Connection,
    place: &str,
    tenant: &TenantId,
    session: &SessionId,
    first: &MessageId,
    last: &MessageId,
) -> Result<Vec<Part>> {
    let mut q = select::<D>(&checked::<D>("id"), "parts", tenant);
    and(&mut q, "session", Arg::Id(session.as_str()));
    q.push(" AND message >= ");
    D::bind(&mut q, Arg::Id(first.as_str()));
    q.push(" AND message <= ");
    D::bind(&mut q, Arg::Id(last.as_str()));
    q.push(" ORDER BY message, id");
    bodies(conn, q, 0, &origin::<D>(place, "parts", tenant))
        .await?
        .iter()
        .map(|body| rows::part(tenant.as_str(), body))
        .collect()
}

pub(crate) async fn message<B: Backend>(
    b: &B,
    tenant: &TenantId,
    session: &SessionId,
    id: &MessageId,
) -> Result<Option<MessageWithParts>> {
    // The message and its parts from one snapshot.
    let mut conn = b.reader(tenant, true).await?;
    let mut q = select::<B::Db>(&checked::<B::Db>("id"), "messages", tenant);
    and(&mut q, "session", Arg::Id(session.as_str()));
    and(&mut q, "id", Arg::Id(id.as_str()));
    let at = origin::<B::Db>(b.place(), "messages", tenant);
    let out = match bodies(&mut *conn, q, 0, &at).await?.pop() {
        None => None,
        Some(body) => {
            let info = rows::message(tenant.as_str(), &body)?;
            let parts = parts_of::<B::Db>(&mut conn, b.place(), tenant, session, id, id).await?;
            Some(MessageWithParts { info, parts })
        }
    };
    conn.finish().await.map_err(B::Db::map)?;
    Ok(out)
}

pub(crate) async fn messages<B: Backend>(
    b: &B,
    tenant: &TenantId,
    session: &SessionId,
    before: Option<&Cursor>,
    limit: usize,
) -> Result<Page> {
    let limit = clamp_limit(limit);
    let mut conn = b.reader(tenant, true).await?;
    let mut q = select::<B::Db>(&checked::<B::Db>("id"), "messages", tenant);
    and(&mut q, "session", Arg::Id(session.as_str()));
    if let Some(c) = before {
        q.push(" AND id < ");
        B::Db::bind(&mut q, Arg::Id(c.message_id().as_str()));
    }
    q.push(" ORDER BY id DESC LIMIT ");
    B::Db::bind(&mut q, Arg::Int(limit as i64 + 1));
    let at = origin::<B::Db>(b.place(), "messages", tenant);
    let found = bodies(&mut *conn, q, 0, &at).await?;
    let more = found.len() > limit;
    let mut infos = found
        .iter()
        .take(limit)
        .map(|body| rows::message(tenant.as_str(), body))
        .collect::<Result<Vec<_>>>()?;
    infos.reverse();
    let messages = match (infos.first(), infos.last()) {
        (Some(first), Some(last)) => {
            let (first, last) = (first.id.clone(), last.id.clone());
            let parts =
                parts_of::<B::Db>(&mut conn, b.place(), tenant, session, &first, &last).await?;
            rows::attach_parts(infos, parts, B::Db::BACKEND)?
        }
        _ => Vec::new(),
    };
    conn.finish().await.map_err(B::Db::map)?;
    let next = if more {
        messages.first().map(|m| Cursor::before(m.info.id.clone()))
    } else {
        None
    };
    Ok(Page { messages, next })
}

/// The open rows of `table`, by `order`.
async fn open_rows<D: Dialect>(
    conn: &mut <D as Database>::Connection,
    place: &str,
    tenant: &TenantId,
    session: Option<&SessionId>,
    table: &str,
    order: &str,
) -> Result<Vec<String>> {
    let mut q = select::<D>(&checked::<D>("id"), table, tenant);
    if let Some(s) = session {
        and(&mut q, "session", Arg::Id(s.as_str()));
    }
    q.push(format_args!(" AND open ORDER BY {order}"));
    bodies(conn, q, 0, &origin::<D>(place, table, tenant)).await
}

pub(crate) async fn open_items<B: Backend>(
    b: &B,
    tenant: &TenantId,
    session: Option<&SessionId>,
) -> Result<OpenItems> {
    let mut conn = b.reader(tenant, true).await?;
    let t = tenant.as_str();
    let messages = open_rows::<B::Db>(
        &mut *conn,
        b.place(),
        tenant,
        session,
        "messages",
        "session, id",
    )
    .await?
    .iter()
    .map(|body| rows::message(t, body))
    .collect::<Result<_>>()?;
    let order = "session, message, id";
    let parts = open_rows::<B::Db>(&mut *conn, b.place(), tenant, session, "parts", order)
        .await?
        .iter()
        .map(|body| rows::part(t, body))
        .collect::<Result<_>>()?;
    conn.finish().await.map_err(B::Db::map)?;
    Ok(OpenItems { messages, parts })
}
