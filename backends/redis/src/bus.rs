//! `RedisBus`: a durable bus on Redis Streams.
//!
//! One stream per (tenant, session) holds its events with entry id `seq-0`, so replay
//! and resume by seq are exact range reads. A per-tenant stream carries every event of
//! the tenant for live tenant subscriptions. `publish` only queues: a background task
//! drains the queue and writes each drained batch as one script (atomic on the
//! server), in order.
//!
//! Session and tenant streams keep about `maxlen` entries (`MAXLEN ~`). A stream that
//! projector workers consume (a work stream, or the tenant stream when it is the work
//! stream) is trimmed by `maxlen` only while it has no consumer group; after that the
//! workers trim it below what every group acknowledged (or, opt-in, publishing bounds it
//! by `work_maxlen`), so a worker that falls behind loses nothing.
//!
//! A batch that fails with a retryable error (the server restarted, the connection
//! broke) is sent again with bounded backoff until [`RedisOptions::retry`]'s deadline;
//! a resent batch that the server did write before the connection broke is recognised
//! entry by entry and not written twice. Past the deadline the batch is dropped and the
//! next [`Bus::flush`] reports the error, naming the server; `recover` then republishes
//! what the store holds and the stream lacks (see `forge_core::recover`).
//!
//! Reads (`last_seq`, `replay`, and the reads that start a subscription) are retried
//! the same way, so a writer claiming a session while the server restarts waits for it
//! instead of failing its turn.

use std::collections::{HashMap, VecDeque};
use std::fmt;

use async_trait::async_trait;
use forge_core::{
    Bus, BusCapabilities, BusEvent, Error, Event, Replay, Result, SessionId, Subscription,
    TenantId, Topic,
};
use redis::aio::ConnectionLike;
use redis::streams::{StreamId, StreamRangeReply, StreamReadReply};
use redis::{Script, Value};
use tokio::sync::{mpsc, oneshot};

use crate::config::RedisOptions;
use crate::conn::Conn;
use crate::error::map;
use crate::keys::{shard_of, Keys};

/// Most events written in one pipeline.
const MAX_BATCH: usize = 1024;
/// Entries read per `XRANGE` / `XREAD` round trip.
const READ_COUNT: usize = 512;

enum Cmd {
    Event(BusEvent),
    /// Answered once everything queued before it was written; `report` takes the
    /// first write error since the last reporting flush.
    Flush {
        done: oneshot::Sender<Result<()>>,
        report: bool,
    },
}

/// A durable bus on Redis Streams.
pub struct RedisBus {
    opts: RedisOptions,
    keys: Keys,
    conn: Conn,
    tx: mpsc::UnboundedSender<Cmd>,
}

impl fmt::Debug for RedisBus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBus")
            .field("prefix", &self.keys.prefix())
            .field("maxlen", &self.opts.maxlen)
            .finish_non_exhaustive()
    }
}

fn stream_id(seq: u64) -> String {
    format!("{seq}-0")
}

/// The seq of an entry id `seq-n`.
fn seq_of(id: &str) -> Result<u64> {
    id.split_once('-')
        .and_then(|(ms, _)| ms.parse().ok())
        .ok_or_else(|| Error::Codec {
            message: format!("stream entry id {id:?} is not seq-n"),
            source: None,
        })
}

pub(crate) fn decode_entry(entry: &StreamId) -> Result<BusEvent> {
    let bytes: Vec<u8> = entry.get("e").ok_or_else(|| Error::Codec {
        message: format!("stream entry {} has no `e` field", entry.id),
        source: None,
    })?;
    // The event's JSON text is kept with it: an SSE frame passes it on as read.
    Ok(serde_json::from_slice(&bytes)?)
}

impl RedisBus {
    /// Connects with `redis://host:port[/db][?prefix=…&maxlen=…]` (see
    /// [`RedisOptions::from_url`]) and starts the publishing task on the current tokio
    /// runtime.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::with_options(RedisOptions::from_url(url)?).await
    }

    /// Connects with parsed options.
    pub async fn with_options(opts: RedisOptions) -> Result<Self> {
        let (mut conn, keys) = opts.connect().await?;
        opts.check_shards(&mut conn).await?;
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(writer(conn.clone(), keys.clone(), opts.clone(), rx));
        Ok(Self {
            opts,
            keys,
            conn,
            tx,
        })
    }

    /// The keys this bus writes.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Waits until everything queued so far was written; with `report`, returns (and
    /// clears) the first write error since the last reporting wait.
    async fn wait_queue(&self, report: bool) -> Result<()> {
        let stopped = || {
            Error::backend(
                crate::error::BACKEND,
                false,
                "the redis bus publishing task has stopped",
            )
        };
        let (done, rx) = oneshot::channel();
        self.tx
            .send(Cmd::Flush { done, report })
            .map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?
    }

    /// Runs the read `attempt` as [`RedisOptions::retry`] says: a read that fails with a
    /// retryable error (the server restarting) is tried again, as publishes are.
    async fn read<T, F, Fut>(&self, what: &str, attempt: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let server = self.opts.server_label();
        self.opts
            .retry
            .run(crate::error::BACKEND, &server, what, attempt)
            .await
    }

    /// The highest seq retention may have dropped from a session's stream (0: none).
    async fn trimmed_through(&self, key: &str) -> Result<u64> {
        self.read("XINFO STREAM", || async {
            trimmed_through(&mut self.conn.clone(), key).await
        })
        .await
    }

    /// The last entry id of a stream, or `0-0`.
    async fn last_id(&self, key: &str) -> Result<String> {
        let reply: StreamRangeReply = self
            .read("XREVRANGE", || async {
                redis::cmd("XREVRANGE")
                    .arg(key)
                    .arg("+")
                    .arg("-")
                    .arg("COUNT")
                    .arg(1)
                    .query_async(&mut self.conn.clone())
                    .await
                    .map_err(map)
            })
            .await?;
        Ok(reply
            .ids
            .into_iter()
            .next()
            .map_or_else(|| "0-0".to_owned(), |e| e.id))
    }

    async fn follow(&self, key: String, after: String, by_seq: bool) -> Result<Subscription> {
        let conn = self.opts.dedicated(&self.conn).await?;
        let block_ms = self.opts.block.as_millis() as u64;
        let state = Follow {
            conn,
            key,
            cursor: after,
            buf: VecDeque::new(),
            block_ms,
            by_seq,
            done: false,
        };
        Ok(Subscription::new(futures::stream::unfold(
            state,
            |mut s| async move {
                let item = s.next().await?;
                Some((item, s))
            },
        )))
    }
}

/// The highest seq retention may have dropped from a session's stream (0: none).
async fn trimmed_through(conn: &mut impl ConnectionLike, key: &str) -> Result<u64> {
    let exists: bool = redis::cmd("EXISTS")
        .arg(key)
        .query_async(&mut *conn)
        .await
        .map_err(map)?;
    if !exists {
        return Ok(0);
    }
    let info: HashMap<String, Value> = redis::cmd("XINFO")
        .arg("STREAM")
        .arg(key)
        .query_async(&mut *conn)
        .await
        .map_err(map)?;
    let field = |name: &str| -> Result<String> {
        let v = info.get(name).ok_or_else(|| {
            Error::Unsupported(format!(
                "XINFO STREAM has no {name}: the redis bus needs Redis 7 or later"
            ))
        })?;
        redis::from_redis_value_ref(v).map_err(|e| Error::codec(format!("XINFO STREAM {name}"), e))
    };
    let num = |name: &str| -> Result<u64> {
        field(name)?
            .parse()
            .map_err(|e| Error::codec(format!("XINFO STREAM {name}"), e))
    };
    // XDEL records its highest deleted id; MAXLEN trimming does not, but it only
    // drops entries from the head, so when fewer entries remain than were added,
    // everything before the first remaining entry may be gone.
    let deleted = seq_of(&field("max-deleted-entry-id")?)?;
    let (added, length) = (num("entries-added")?, num("length")?);
    let trimmed = if added <= length {
        0
    } else if length == 0 {
        seq_of(&field("last-generated-id")?)?
    } else {
        seq_of(&field("recorded-first-entry-id")?)?.saturating_sub(1)
    };
    Ok(deleted.max(trimmed))
}

/// The state of one subscription: its own connection and the last id delivered.
struct Follow {
    conn: Conn,
    key: String,
    cursor: String,
    buf: VecDeque<BusEvent>,
    block_ms: u64,
    /// Entry ids are `seq-0` (a session stream): a jump past trimmed entries is
    /// reported as [`Error::Lagged`].
    by_seq: bool,
    done: bool,
}

impl Follow {
    /// `Some(Err(Lagged))` when retention dropped entries between the cursor and
    /// `first` (only checked when seqs jump, so the common path costs nothing).
    async fn lagged(&mut self, first: Option<&StreamId>) -> Option<Result<BusEvent>> {
        if !self.by_seq {
            return None;
        }
        let first = seq_of(&first?.id).ok()?;
        let after = seq_of(&self.cursor).ok()?;
        if first <= after + 1 {
            return None;
        }
        match trimmed_through(&mut self.conn, &self.key).await {
            Ok(trimmed) if trimmed > after => Some(Err(Error::Lagged {
                missed: trimmed.min(first - 1) - after,
            })),
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        }
    }

    async fn next(&mut self) -> Option<Result<BusEvent>> {
        loop {
            if let Some(ev) = self.buf.pop_front() {
                return Some(Ok(ev));
            }
            if self.done {
                return None;
            }
            let reply: Option<StreamReadReply> = match redis::cmd("XREAD")
                .arg("COUNT")
                .arg(READ_COUNT)
                .arg("BLOCK")
                .arg(self.block_ms)
                .arg("STREAMS")
                .arg(&self.key)
                .arg(&self.cursor)
                .query_async(&mut self.conn)
                .await
            {
                Ok(r) => r,
                Err(e) => {
                    self.done = true;
                    return Some(Err(map(e)));
                }
            };
            let entries: Vec<StreamId> = reply
                .into_iter()
                .flat_map(|r| r.keys)
                .flat_map(|k| k.ids)
                .collect();
            let lag = self.lagged(entries.first()).await;
            for entry in entries {
                self.cursor.clone_from(&entry.id);
                match decode_entry(&entry) {
                    Ok(ev) => self.buf.push_back(ev),
                    Err(e) => {
                        self.done = true;
                        return Some(Err(e));
                    }
                }
            }
            if let Some(lag) = lag {
                return Some(lag);
            }
        }
    }
}

/// Drains the queue: each drained batch is one script, retried as
/// [`RedisOptions::retry`] says; flushes are answered after everything queued before
/// them was written (or given up on).
async fn writer(conn: Conn, keys: Keys, opts: RedisOptions, mut rx: mpsc::UnboundedReceiver<Cmd>) {
    let script = Script::new(include_str!("publish.lua"));
    let server = opts.server_label();
    let mut failed: Option<Error> = None;
    let mut events = Vec::new();
    let mut flushes = Vec::new();
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some(cmd) = next {
            match cmd {
                Cmd::Event(e) => events.push(e),
                Cmd::Flush { done, report } => flushes.push((done, report)),
            }
            next = if events.len() < MAX_BATCH {
                rx.try_recv().ok()
            } else {
                None
            };
        }
        if !events.is_empty() {
            let mut sent = false;
            let outcome = opts
                .retry
                .run(crate::error::BACKEND, &server, "publish", || {
                    let retry = std::mem::replace(&mut sent, true);
                    write(conn.clone(), &script, &keys, &opts, &events, retry)
                })
                .await;
            if let Err(e) = outcome {
                tracing::warn!(
                    events = events.len(),
                    error = &e as &(dyn std::error::Error + 'static),
                    "publishing to the redis streams failed; the events are not on the bus",
                );
                failed.get_or_insert(e);
            }
            events.clear();
        }
        for (done, report) in flushes.drain(..) {
            let result = if report {
                failed.take().map_or(Ok(()), Err)
            } else {
                Ok(())
            };
            let _ = done.send(result);
        }
    }
}

/// Writes `events` with the publish script; `retry`: the batch was sent before and
/// its answer lost. On a Redis Cluster the script runs once per tenant (a tenant's
/// keys share one slot), in order of first appearance.
async fn write(
    mut conn: Conn,
    script: &Script,
    keys: &Keys,
    opts: &RedisOptions,
    events: &[BusEvent],
    retry: bool,
) -> Result<()> {
    let shards = opts.shards;
    let mut groups: Vec<Vec<&BusEvent>> = Vec::new();
    if conn.is_cluster() {
        for ev in events {
            match groups.iter_mut().find(|g| g[0].tenant == ev.tenant) {
                Some(g) => g.push(ev),
                None => groups.push(vec![ev]),
            }
        }
    } else {
        groups.push(events.iter().collect());
    }
    let mut failed: Vec<String> = Vec::new();
    for group in groups {
        let Some(first) = group.first() else {
            continue;
        };
        let mut invocation = script.key(keys.tenant_stream(&first.tenant));
        invocation
            .arg(opts.maxlen)
            .arg(if retry { "1" } else { "0" })
            .arg(opts.work_maxlen.unwrap_or(0))
            .arg(if shards <= 1 { "1" } else { "0" });
        for ev in &group {
            // The event's kept JSON when something in this process produced it.
            let json = serde_json::to_vec(ev)?;
            // Work streams carry what projector workers apply: sync events only.
            let work = if shards > 1 && matches!(ev.event, Event::Sync(_)) {
                keys.work_stream(&ev.tenant, shard_of(&ev.session_id, shards), shards)
            } else {
                String::new()
            };
            invocation
                .arg(keys.session_stream(&ev.tenant, &ev.session_id))
                .arg(keys.tenant_stream(&ev.tenant))
                .arg(work)
                .arg(ev.seq)
                .arg(json);
        }
        // Every event is tried even when one fails (e.g. a seq at or below the
        // stream's last id); the failures are reported to the next flush.
        let refused: Vec<String> = invocation.invoke_async(&mut conn).await.map_err(map)?;
        failed.extend(refused);
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Error::backend(
            crate::error::BACKEND,
            false,
            format!(
                "the streams refused {} event(s): {}",
                failed.len(),
                failed.join("; ")
            ),
        ))
    }
}

#[async_trait]
impl Bus for RedisBus {
    fn capabilities(&self) -> BusCapabilities {
        BusCapabilities::new("redis", true, true)
    }

    fn publish(&self, event: BusEvent) -> Result<()> {
        self.tx.send(Cmd::Event(event)).map_err(|_| {
            Error::backend(
                crate::error::BACKEND,
                false,
                "the redis bus publishing task has stopped",
            )
        })
    }

    async fn flush(&self) -> Result<()> {
        self.wait_queue(true).await
    }

    async fn subscribe(
        &self,
        tenant: &TenantId,
        topic: Topic,
        from_seq: Option<u64>,
    ) -> Result<Subscription> {
        // What this process published before the call is written first, so "live from
        // now" starts after it.
        self.wait_queue(false).await?;
        match topic {
            Topic::Tenant => {
                if from_seq.is_some() {
                    return Err(Error::invalid(
                        "a tenant subscription cannot resume from a seq (seqs are per session)",
                    ));
                }
                let key = self.keys.tenant_stream(tenant);
                let after = self.last_id(&key).await?;
                self.follow(key, after, false).await
            }
            Topic::Session(session) => {
                let key = self.keys.session_stream(tenant, &session);
                let after = match from_seq {
                    None => self.last_id(&key).await?,
                    Some(from) => {
                        let trimmed = self.trimmed_through(&key).await?;
                        if trimmed >= from && from > 0 {
                            return Err(Error::invalid(format!(
                                "cannot resume session {session} from seq {from}: events \
                                 through seq {trimmed} are no longer retained"
                            )));
                        }
                        stream_id(from.saturating_sub(1))
                    }
                };
                self.follow(key, after, true).await
            }
        }
    }

    async fn replay(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Replay> {
        self.wait_queue(false).await?;
        let key = self.keys.session_stream(tenant, session);
        let mut events = Vec::new();
        let mut start = stream_id(from_seq.max(1));
        loop {
            let reply: StreamRangeReply = self
                .read("XRANGE", || async {
                    redis::cmd("XRANGE")
                        .arg(&key)
                        .arg(&start)
                        .arg("+")
                        .arg("COUNT")
                        .arg(READ_COUNT)
                        .query_async(&mut self.conn.clone())
                        .await
                        .map_err(map)
                })
                .await?;
            let n = reply.ids.len();
            for entry in &reply.ids {
                events.push(decode_entry(entry)?);
            }
            match reply.ids.last() {
                Some(last) if n == READ_COUNT => start = format!("({}", last.id),
                _ => break,
            }
        }
        let trimmed = self.trimmed_through(&key).await?;
        Ok(Replay {
            events,
            truncated: trimmed > 0 && trimmed >= from_seq,
        })
    }

    async fn last_seq(&self, tenant: &TenantId, session: &SessionId) -> Result<Option<u64>> {
        self.wait_queue(false).await?;
        let id = self
            .last_id(&self.keys.session_stream(tenant, session))
            .await?;
        let seq = seq_of(&id)?;
        Ok((seq > 0).then_some(seq))
    }
}
