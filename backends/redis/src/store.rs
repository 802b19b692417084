//! `RedisStore`: sessions, messages and parts in hashes with sorted-set indexes.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use forge_core::blob::{BlobEntry, BlobId, BlobValue};
use forge_core::{
    codec, store::clamp_limit, Capabilities, Claim, ClaimRequest, Cursor, Envelope, Error,
    Footprint, Message, MessageId, MessageWithParts, Occupied, OpenItems, Page, Part, Reclaimed,
    Result, SearchHit, SearchKind, SearchQuery, Session, SessionId, SessionPage, SessionState,
    Store, SyncEvent, TenantId,
};
use redis::Script;

use crate::config::RedisOptions;
use crate::conn::Conn;
use crate::error::map;
use crate::fence::{self, Fences};
use crate::keys::{hex, unhex, Keys};

/// A row's JSON text inside the versioned binary value of [`forge_core::codec`].
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
struct JsonRow {
    json: String,
}

fn encode<T: serde::Serialize>(v: &T) -> Result<Vec<u8>> {
    codec::encode(&JsonRow {
        json: serde_json::to_string(v)?,
    })
}

pub(crate) fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T> {
    let row: JsonRow = codec::decode(bytes).map_err(|e| match e {
        Error::Codec { message, source } => Error::Codec {
            message: format!("{what}: {message}"),
            source,
        },
        other => other,
    })?;
    serde_json::from_str(&row.json).map_err(|e| Error::codec(format!("{what}: JSON"), e))
}

/// Deletes `keys` one by one (on a cluster a multi-key `DEL` must stay in one slot).
async fn delete(conn: &mut Conn, keys: &[String]) -> Result<usize> {
    if keys.is_empty() {
        return Ok(0);
    }
    if !conn.is_cluster() {
        return redis::cmd("DEL")
            .arg(keys)
            .query_async(conn)
            .await
            .map_err(map);
    }
    let mut n = 0;
    for key in keys {
        n += redis::cmd("DEL")
            .arg(key)
            .query_async::<usize>(&mut *conn)
            .await
            .map_err(map)?;
    }
    Ok(n)
}

/// A store on Redis. Every `apply` batch is one Lua script (atomic on the server;
/// on a Redis Cluster, atomic per tenant, every part validated before any is written).
/// Fence records are hashes in their session's slot, claimed and released by scripts
/// and checked by the apply script itself (see [`Keys::fence`]). The full-text index
/// is written by the same script (see the crate docs, "Full-text index").
#[derive(Clone)]
pub struct RedisStore {
    conn: Conn,
    keys: Keys,
    apply: Script,
    fences: Fences,
    search: bool,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.keys.prefix())
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects with `redis://host:port[/db][?prefix=…]` (see [`RedisOptions::from_url`]).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::with_options(&RedisOptions::from_url(url)?).await
    }

    /// Connects with parsed options. With `search=on` this builds the full-text index
    /// of every tenant lacking one; with `off` it drops every index of the prefix (each
    /// once: `PREFIX:search` records what was done).
    pub async fn with_options(opts: &RedisOptions) -> Result<Self> {
        let (conn, keys, fresh) = opts.open().await?;
        let store = Self {
            conn,
            keys,
            apply: Script::new(concat!(
                include_str!("search.lua"),
                include_str!("apply.lua")
            )),
            fences: Fences::new(),
            search: opts.search,
        };
        store.setup_search(fresh).await?;
        Ok(store)
    }

    /// Whether this store keeps a full-text index (`search=on`).
    pub fn search_on(&self) -> bool {
        self.search
    }

    /// The keys this store writes.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Whether the server is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.conn.is_cluster()
    }

    /// Deletes every key under the prefix — every tenant's rows, and the streams of a
    /// [`crate::RedisBus`] with the same prefix — and returns how many it deleted. For
    /// tests and for removing a deployment: what is written under the prefix while it
    /// runs may be left.
    ///
    /// # Errors
    /// [`Error::Backend`] when the server fails.
    pub async fn clear(&self) -> Result<usize> {
        let mut conn = self.conn();
        let pattern = self.keys.pattern();
        let masters = conn.masters().await?;
        let nodes: Vec<Option<&(String, u16)>> = if conn.is_cluster() {
            masters.iter().map(Some).collect()
        } else {
            vec![None]
        };
        let mut deleted = 0;
        // A cluster node answers SCAN for its own keys only: scan every master.
        for node in nodes {
            let mut cursor: u64 = 0;
            loop {
                let (next, keys): (u64, Vec<String>) = conn
                    .on_node(
                        node,
                        redis::cmd("SCAN")
                            .arg(cursor)
                            .arg("MATCH")
                            .arg(&pattern)
                            .arg("COUNT")
                            .arg(500),
                    )
                    .await?;
                deleted += delete(&mut conn, &keys).await?;
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(deleted)
    }

    fn conn(&self) -> Conn {
        self.conn.clone()
    }

    /// A handle on the store's connection (for the blob calls).
    pub(crate) fn connection(&self) -> Conn {
        self.conn.clone()
    }

    /// Every key matching `pattern` (a `SCAN` of the single server or of every master
    /// of a cluster).
    pub(crate) async fn scan_keys(&self, pattern: &str) -> Result<Vec<String>> {
        let mut conn = self.conn();
        let masters = conn.masters().await?;
        let nodes: Vec<Option<&(String, u16)>> = if conn.is_cluster() {
            masters.iter().map(Some).collect()
        } else {
            vec![None]
        };
        let mut out = Vec::new();
        for node in nodes {
            let mut cursor: u64 = 0;
            loop {
                let (next, keys): (u64, Vec<String>) = conn
                    .on_node(
                        node,
                        redis::cmd("SCAN")
                            .arg(cursor)
                            .arg("MATCH")
                            .arg(pattern)
                            .arg("COUNT")
                            .arg(1000),
                    )
                    .await?;
                out.extend(keys);
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(out)
    }

    async fn parts_of(&self, base: &str, ids: &[MessageId]) -> Result<Vec<Vec<Part>>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.hgetall(self.keys.parts(base, id));
        }
        let raw: Vec<Vec<(String, Vec<u8>)>> =
            pipe.query_async(&mut self.conn()).await.map_err(map)?;
        raw.into_iter()
            .map(|mut rows| {
                rows.sort_by(|a, b| a.0.cmp(&b.0));
                rows.iter().map(|(_, v)| decode(v, "part")).collect()
            })
            .collect()
    }

    /// Messages (with parts) of one session by id, skipping ids that vanished.
    async fn with_parts(&self, base: &str, ids: &[MessageId]) -> Result<Vec<MessageWithParts>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<Option<Vec<u8>>> = redis::cmd("HMGET")
            .arg(format!("{base}:m"))
            .arg(ids.iter().map(MessageId::as_str).collect::<Vec<_>>())
            .query_async(&mut self.conn())
            .await
            .map_err(map)?;
        let parts = self.parts_of(base, ids).await?;
        let mut out = Vec::with_capacity(ids.len());
        for (row, parts) in rows.into_iter().zip(parts) {
            if let Some(row) = row {
                out.push(MessageWithParts {
                    info: decode::<Message>(&row, "message")?,
                    parts,
                });
            }
        }
        Ok(out)
    }

    /// The ids of every session of `tenant`, from its session index.
    async fn session_ids(&self, tenant: &TenantId) -> Result<Vec<SessionId>> {
        let ids: Vec<String> = redis::cmd("ZRANGE")
            .arg(self.keys.sessions(tenant))
            .arg(0)
            .arg(-1)
            .query_async(&mut self.conn())
            .await
            .map_err(map)?;
        Ok(ids.into_iter().map(SessionId::from).collect())
    }

    async fn sessions_of(
        &self,
        tenant: &TenantId,
        ids: Vec<SessionId>,
    ) -> Result<Vec<SessionState>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for id in &ids {
            pipe.cmd("HMGET")
                .arg(format!("{}:info", self.keys.session_base(tenant, id)))
                .arg("v")
                .arg("seq");
        }
        let rows: Vec<(Option<Vec<u8>>, Option<String>)> =
            pipe.query_async(&mut self.conn()).await.map_err(map)?;
        let mut out = Vec::new();
        for (v, seq) in rows {
            if let Some(v) = v {
                let seq = seq
                    .unwrap_or_default()
                    .parse()
                    .map_err(|e| Error::codec("session seq", e))?;
                out.push(SessionState {
                    info: decode::<Session>(&v, "session")?,
                    seq,
                });
            }
        }
        Ok(out)
    }

    /// Runs the apply script over `batch` (of one tenant on a cluster); `check`:
    /// validate only.
    async fn run_apply(&self, batch: &[Envelope<SyncEvent>], check: bool) -> Result<()> {
        let Some(first) = batch.first() else {
            return Ok(());
        };
        let mut args = Vec::with_capacity(2 + batch.len() * 13);
        args.push(if check {
            b"check".to_vec()
        } else {
            b"apply".to_vec()
        });
        args.push(if self.search {
            b"1".to_vec()
        } else {
            b"0".to_vec()
        });
        for env in batch {
            self.push_op(&mut args, env, !check)?;
        }
        let mut inv = self.apply.key(self.keys.sessions(&first.tenant));
        for a in &args {
            inv.arg(a.as_slice());
        }
        let reply: Vec<String> = inv.invoke_async(&mut self.conn()).await.map_err(map)?;
        match reply.as_slice() {
            [ok] if ok == "ok" => Ok(()),
            [f, at, epoch, holder, expires] if f == "fenced" => {
                let env = at
                    .parse::<usize>()
                    .ok()
                    .and_then(|i| batch.get(i))
                    .ok_or_else(|| fence::unexpected("apply", &reply))?;
                let key = self.keys.fence(&env.tenant, &env.session_id);
                let current = fence::record(&key, epoch, holder, expires)?;
                Err(Error::fenced(&env.session_id, env.epoch, current.as_ref()))
            }
            [nf, what, id] if nf == "notfound" => Err(Error::NotFound {
                what: if what == "session" {
                    "session"
                } else {
                    "message"
                },
                id: id.clone(),
            }),
            other => Err(fence::unexpected("apply", other)),
        }
    }

    /// Appends the 13 script fields of one event: a part upsert's last three are its
    /// document (`index::doc_args`) when `write` (the check pass reads none), or `-`
    /// with `search=off` (not read).
    fn push_op(
        &self,
        args: &mut Vec<Vec<u8>>,
        env: &Envelope<SyncEvent>,
        write: bool,
    ) -> Result<()> {
        env.check()?;
        let base = self.keys.session_base(&env.tenant, &env.session_id);
        let (op, mid, pid, val, open): (&str, &str, &str, Vec<u8>, bool) = match &env.event {
            SyncEvent::SessionUpdated { info } => ("su", "", "", encode(info)?, false),
            SyncEvent::SessionDeleted { .. } => ("sd", "", "", Vec::new(), false),
            SyncEvent::MessageUpdated { info } => {
                ("mu", info.id.as_str(), "", encode(info)?, info.is_open())
            }
            SyncEvent::MessageRemoved { message_id, .. } => {
                ("mr", message_id.as_str(), "", Vec::new(), false)
            }
            SyncEvent::PartUpdated { part } => (
                "pu",
                part.message_id.as_str(),
                part.id.as_str(),
                encode(part)?,
                part.is_open(),
            ),
            SyncEvent::PartRemoved {
                message_id,
                part_id,
                ..
            } => (
                "pr",
                message_id.as_str(),
                part_id.as_str(),
                Vec::new(),
                false,
            ),
        };
        let doc = match &env.event {
            SyncEvent::PartUpdated { part } if self.search && write => {
                crate::index::doc_args(part).unwrap_or_default()
            }
            SyncEvent::PartUpdated { .. } => [b"-".to_vec(), Vec::new(), Vec::new()],
            _ => Default::default(),
        };
        let [len, list, tfs] = doc;
        args.extend([
            op.as_bytes().to_vec(),
            env.seq.to_string().into_bytes(),
            base.into_bytes(),
            self.keys.sessions(&env.tenant).into_bytes(),
            env.session_id.as_str().as_bytes().to_vec(),
            mid.as_bytes().to_vec(),
            pid.as_bytes().to_vec(),
            val,
            if open { b"1".to_vec() } else { b"0".to_vec() },
            env.epoch
                .map_or_else(Vec::new, |e| fence::epoch_arg(e).into_bytes()),
            len,
            list,
            tfs,
        ]);
        Ok(())
    }
}

#[async_trait]
impl Store for RedisStore {
    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new("redis");
        caps.blobs = true;
        caps.search = if self.search {
            SearchKind::Index
        } else {
            SearchKind::Off
        };
        caps
    }

    /// Reads the tenant's full-text index (see the crate docs, "Full-text index"): the
    /// postings of the query's words, rarest first; every match scored by BM25 (over
    /// the tenant, or over the session asked for, as the scan does); the best read back
    /// with their rows by one script.
    async fn search(&self, tenant: &TenantId, query: &SearchQuery) -> Result<Vec<SearchHit>> {
        self.search_in(tenant, query).await
    }

    async fn put_blobs(
        &self,
        tenant: &TenantId,
        blobs: &[BlobValue],
        now_ms: i64,
        refresh_before_ms: i64,
    ) -> Result<u64> {
        self.put_blobs_in(tenant, blobs, now_ms, refresh_before_ms)
            .await
    }

    async fn blobs(&self, tenant: &TenantId, ids: &[BlobId]) -> Result<Vec<Option<Arc<str>>>> {
        self.blobs_in(tenant, ids).await
    }

    async fn blob_list(&self, tenant: &TenantId) -> Result<Vec<BlobEntry>> {
        self.blob_list_in(tenant).await
    }

    async fn delete_blobs(
        &self,
        tenant: &TenantId,
        ids: &[BlobId],
        touched_before_ms: i64,
    ) -> Result<u64> {
        self.delete_blobs_in(tenant, ids, touched_before_ms).await
    }

    async fn claim(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        request: &ClaimRequest,
    ) -> Result<Claim> {
        let key = self.keys.fence(tenant, session);
        self.fences
            .claim(&mut self.conn(), &key, session, request)
            .await
    }

    async fn release(&self, tenant: &TenantId, session: &SessionId, epoch: u64) -> Result<()> {
        let key = self.keys.fence(tenant, session);
        self.fences.release(&mut self.conn(), &key, epoch).await
    }

    async fn claimed(&self, tenant: &TenantId, session: &SessionId) -> Result<Option<Claim>> {
        fence::claimed(&mut self.conn(), &self.keys.fence(tenant, session)).await
    }

    async fn apply(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        let Some(first) = batch.first() else {
            return Ok(());
        };
        if !self.conn.is_cluster() || batch.iter().all(|e| e.tenant == first.tenant) {
            return self.run_apply(batch, false).await;
        }
        // A cluster runs a script on one slot, and each tenant has its own: the batch
        // is applied tenant by tenant (in order within each). Every part is checked
        // first, so a batch that refers to a missing row or is fenced (an epoch that
        // is not its session's current one) is refused before any write, as on a
        // single server. (Atomic per tenant: a crash between two tenants' parts
        // leaves the first applied, which is what a crash before the batch was
        // confirmed may do; see docs/design.md §6.)
        //
        // Fencing holds per session exactly as on one server: every session lives in
        // its tenant's slot, and the write pass checks the fence records of its part's
        // sessions again in the script that writes them, so no event lands under an
        // epoch that a claim had replaced before that script ran. What is not atomic
        // is the batch across tenants: a claim granted between the check pass and the
        // write pass fails the part of its tenant (with `Fenced`, writing nothing of
        // that part) after the parts of the tenants before it were written.
        let mut tenants: Vec<&TenantId> = Vec::new();
        for env in batch {
            if !tenants.contains(&&env.tenant) {
                tenants.push(&env.tenant);
            }
        }
        let groups: Vec<Vec<Envelope<SyncEvent>>> = tenants
            .iter()
            .map(|t| batch.iter().filter(|e| &e.tenant == *t).cloned().collect())
            .collect();
        for group in &groups {
            self.run_apply(group, true).await?;
        }
        for group in &groups {
            self.run_apply(group, false).await?;
        }
        Ok(())
    }

    async fn session(&self, tenant: &TenantId, id: &SessionId) -> Result<Option<SessionState>> {
        Ok(self.sessions_of(tenant, vec![id.clone()]).await?.pop())
    }

    async fn sessions(&self, tenant: &TenantId) -> Result<Vec<SessionState>> {
        let ids = self.session_ids(tenant).await?;
        self.sessions_of(tenant, ids).await
    }

    /// A range of the session index (all scores 0, so ordered by id): one more id than
    /// the page is read to know whether more follow.
    async fn sessions_after(
        &self,
        tenant: &TenantId,
        after: Option<&SessionId>,
        limit: usize,
    ) -> Result<SessionPage> {
        let limit = clamp_limit(limit);
        let from = after.map_or_else(|| "-".to_owned(), |a| format!("({a}"));
        let mut ids: Vec<String> = redis::cmd("ZRANGE")
            .arg(self.keys.sessions(tenant))
            .arg(from)
            .arg("+")
            .arg("BYLEX")
            .arg("LIMIT")
            .arg(0)
            .arg(limit + 1)
            .query_async(&mut self.conn())
            .await
            .map_err(map)?;
        let more = ids.len() > limit;
        ids.truncate(limit);
        let sessions = self
            .sessions_of(tenant, ids.into_iter().map(SessionId::from).collect())
            .await?;
        let next = more
            .then(|| sessions.last().map(|s| s.info.id.clone()))
            .flatten();
        Ok(SessionPage { sessions, next })
    }

    /// With AOF on, rewrites the append-only file (`BGREWRITEAOF`) so that it holds the
    /// live data again instead of every write since the last rewrite, and waits up to
    /// a minute for the rewrite to end. Memory needs nothing: deleted keys are freed at
    /// once. The whole server is rewritten, every prefix and tenant; Redis itself
    /// rewrites when the file doubles (`auto-aof-rewrite-percentage`).
    async fn reclaim(&self) -> Result<Reclaimed> {
        let aof = |info: &str, field: &str| -> Option<u64> {
            info.lines().find_map(|l| {
                l.strip_prefix(field)
                    .and_then(|v| v.strip_prefix(':'))
                    .and_then(|v| v.trim().parse().ok())
            })
        };
        let persistence = || async {
            redis::cmd("INFO")
                .arg("persistence")
                .query_async::<String>(&mut self.conn())
                .await
                .map_err(map)
        };
        // A cluster answers INFO per node, not as one text: its nodes rewrite their
        // files by themselves (`auto-aof-rewrite-percentage`).
        let Ok(info) = persistence().await else {
            return Ok(Reclaimed::new(
                0,
                0,
                "nothing to do: INFO is answered per node (a cluster rewrites by itself)",
            ));
        };
        if aof(&info, "aof_enabled") != Some(1) {
            return Ok(Reclaimed::new(
                0,
                0,
                "nothing to do: memory is freed at once, no AOF",
            ));
        }
        let before = aof(&info, "aof_current_size").unwrap_or(0);
        let started: redis::RedisResult<String> = redis::cmd("BGREWRITEAOF")
            .query_async(&mut self.conn())
            .await;
        // A rewrite already running (or scheduled) answers with an error: wait for it.
        let note = match started {
            Ok(_) => "BGREWRITEAOF",
            Err(_) => "BGREWRITEAOF (one was running)",
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            let info = persistence().await?;
            let running = aof(&info, "aof_rewrite_in_progress") == Some(1)
                || aof(&info, "aof_rewrite_scheduled") == Some(1);
            if !running {
                let after = aof(&info, "aof_current_size").unwrap_or(before);
                return Ok(Reclaimed::new(before, after, note));
            }
            if std::time::Instant::now() > deadline {
                return Ok(Reclaimed::new(
                    before,
                    before,
                    format!("{note}: still running"),
                ));
            }
        }
    }

    /// The server's memory (`used_memory`) and, with AOF on, its file
    /// (`aof_current_size`): the whole server, every prefix and tenant. Empty where the
    /// server does not answer `INFO` as one text (a cluster answers per node).
    async fn footprint(&self) -> Result<Footprint> {
        let mut items = Vec::new();
        for (section, field, kind) in [
            ("memory", "used_memory", "memory"),
            ("persistence", "aof_current_size", "file"),
        ] {
            let Ok(text) = redis::cmd("INFO")
                .arg(section)
                .query_async::<String>(&mut self.conn())
                .await
            else {
                continue;
            };
            let value = text.lines().find_map(|l| {
                l.strip_prefix(field)
                    .and_then(|v| v.strip_prefix(':'))
                    .and_then(|v| v.trim().parse::<u64>().ok())
            });
            if let Some(bytes) = value {
                items.push(Occupied {
                    name: field.to_owned(),
                    kind: kind.to_owned(),
                    bytes,
                });
            }
        }
        Ok(Footprint { items })
    }

    async fn message(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &MessageId,
    ) -> Result<Option<MessageWithParts>> {
        let base = self.keys.session_base(tenant, session);
        Ok(self
            .with_parts(&base, std::slice::from_ref(id))
            .await?
            .pop())
    }

    async fn messages(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        before: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page> {
        let limit = clamp_limit(limit);
        let base = self.keys.session_base(tenant, session);
        let max = match before {
            Some(c) => {
                let mut m = b"(".to_vec();
                m.extend_from_slice(c.message_id().as_str().as_bytes());
                m
            }
            None => b"+".to_vec(),
        };
        let newest_first: Vec<String> = redis::cmd("ZREVRANGEBYLEX")
            .arg(format!("{base}:mi"))
            .arg(max)
            .arg("-")
            .arg("LIMIT")
            .arg(0)
            .arg(limit + 1)
            .query_async(&mut self.conn())
            .await
            .map_err(map)?;
        let more = newest_first.len() > limit;
        let ids: Vec<MessageId> = newest_first
            .into_iter()
            .take(limit)
            .rev()
            .map(MessageId::from)
            .collect();
        let messages = self.with_parts(&base, &ids).await?;
        let next = if more {
            ids.first().map(|id| Cursor::before(id.clone()))
        } else {
            None
        };
        Ok(Page { messages, next })
    }

    async fn open_items(
        &self,
        tenant: &TenantId,
        session: Option<&SessionId>,
    ) -> Result<OpenItems> {
        let sessions: Vec<SessionId> = match session {
            Some(s) => vec![s.clone()],
            None => self.session_ids(tenant).await?,
        };
        let mut out = OpenItems::default();
        for sid in sessions {
            let base = self.keys.session_base(tenant, &sid);
            let (mut om, op): (Vec<String>, Vec<String>) = redis::pipe()
                .smembers(format!("{base}:om"))
                .smembers(format!("{base}:op"))
                .query_async(&mut self.conn())
                .await
                .map_err(map)?;
            om.sort();
            if !om.is_empty() {
                let rows: Vec<Option<Vec<u8>>> = redis::cmd("HMGET")
                    .arg(format!("{base}:m"))
                    .arg(&om)
                    .query_async(&mut self.conn())
                    .await
                    .map_err(map)?;
                for row in rows.into_iter().flatten() {
                    out.messages.push(decode(&row, "message")?);
                }
            }
            let mut refs: Vec<(String, String)> = op
                .iter()
                .filter_map(|m| {
                    let (h, pid) = m.split_once(':')?;
                    Some((unhex(h)?, pid.to_owned()))
                })
                .collect();
            refs.sort();
            if !refs.is_empty() {
                let mut pipe = redis::pipe();
                for (mid, pid) in &refs {
                    pipe.hget(format!("{base}:p:{}", hex(mid)), pid);
                }
                let rows: Vec<Option<Vec<u8>>> =
                    pipe.query_async(&mut self.conn()).await.map_err(map)?;
                for row in rows.into_iter().flatten() {
                    out.parts.push(decode(&row, "part")?);
                }
            }
        }
        Ok(out)
    }
}
