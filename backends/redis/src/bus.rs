//! `RedisBus`: a durable bus on Redis Streams.
//!
//! One stream per (tenant, session) holds its events with entry id `seq-0`, so replay
//! and resume by seq are exact range reads. A per-tenant stream carries every event of
//! the tenant, in order, for live tenant subscriptions: a delta there is a reference to
//! its session stream entry, which holds its text (see `entry` for the formats).
//! `publish` only queues: a background task drains the queue and writes each drained
//! batch as one script (atomic on the server), in order.
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
    SyncEvent, TenantId, Topic,
};
use redis::aio::ConnectionLike;
use redis::streams::{StreamId, StreamRangeReply, StreamReadReply};
use redis::{Script, Value};
use tokio::sync::{mpsc, oneshot};

use crate::config::RedisOptions;
use crate::conn::Conn;
use crate::entry::{self, seq_of, Entry};
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

    async fn follow(
        &self,
        key: String,
        after: String,
        tenant: &TenantId,
        session: Option<SessionId>,
    ) -> Result<Subscription> {
        let conn = self.opts.dedicated(&self.conn).await?;
        let block_ms = self.opts.block.as_millis() as u64;
        let state = Follow {
            conn,
            keys: self.keys.clone(),
            tenant: tenant.clone(),
            session,
            key,
            cursor: after,
            buf: VecDeque::new(),
            block_ms,
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
        // The first entry may be a run of deltas that starts before its id's seq.
        let first: StreamRangeReply = redis::cmd("XRANGE")
            .arg(key)
            .arg("-")
            .arg("+")
            .arg("COUNT")
            .arg(1)
            .query_async(&mut *conn)
            .await
            .map_err(map)?;
        match first.ids.first() {
            Some(entry) => entry::first_seq(entry)?.saturating_sub(1),
            None => seq_of(&field("last-generated-id")?)?,
        }
    };
    Ok(deleted.max(trimmed))
}

/// The state of one subscription: its own connection and the last id delivered.
struct Follow {
    conn: Conn,
    keys: Keys,
    tenant: TenantId,
    /// The session of a session stream, whose entry ids are `seq-0`: a jump past
    /// trimmed entries is reported as [`Error::Lagged`]. `None`: the tenant stream,
    /// whose delta references are read from their session streams.
    session: Option<SessionId>,
    key: String,
    cursor: String,
    buf: VecDeque<Result<BusEvent>>,
    block_ms: u64,
    done: bool,
}

/// An entry of a tenant stream batch: its event, or where to read its deltas (their
/// session, the last seq, how many).
enum Slot {
    Ready(BusEvent),
    Wanted(SessionId, u64, u64),
}

impl Follow {
    /// `Some(Err(Lagged))` when retention dropped entries between the cursor and
    /// `first` (only checked when seqs jump, so the common path costs nothing).
    async fn lagged(&mut self, first: Option<&StreamId>) -> Option<Result<BusEvent>> {
        self.session.as_ref()?;
        let first = first?;
        let after = seq_of(&self.cursor).ok()?;
        // An entry's first seq is at most its id's: only a jump in ids is worth reading
        // the entry for (a run's first seq).
        if seq_of(&first.id).ok()? <= after + 1 {
            return None;
        }
        let first = entry::first_seq(first).ok()?;
        if first <= after + 1 {
            return None;
        }
        match trimmed_through(&mut self.conn, &self.key).await {
            Ok(trimmed) if trimmed > after => {
                let missed = trimmed.min(first - 1) - after;
                metrics::counter!(forge_core::metrics::BUS_LAGGED, "bus" => "redis")
                    .increment(missed);
                Some(Err(Error::Lagged { missed }))
            }
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        }
    }

    /// Reads the deltas `slots` refer to from their session streams (one range per
    /// session, pipelined), queues the batch's events in order, and returns how many
    /// referenced deltas retention had already dropped.
    async fn resolve(&mut self, slots: Vec<Slot>) -> Result<u64> {
        let mut ranges: Vec<(SessionId, u64, u64)> = Vec::new();
        for slot in &slots {
            if let Slot::Wanted(session, seq, count) = slot {
                let from = seq + 1 - count;
                match ranges.iter_mut().find(|r| &r.0 == session) {
                    Some(r) => (r.1, r.2) = (r.1.min(from), r.2.max(*seq)),
                    None => ranges.push((session.clone(), from, *seq)),
                }
            }
        }
        // By the range's index and the seq: no session id copied per delta.
        let mut found: HashMap<(usize, u64), BusEvent> = HashMap::new();
        if !ranges.is_empty() {
            // The entry holding seq `to` has an id at or after it, and seqs `from ..=
            // to` are in at most `to - from + 1` entries.
            let mut pipe = redis::pipe();
            for (session, from, to) in &ranges {
                pipe.cmd("XRANGE")
                    .arg(self.keys.session_stream(&self.tenant, session))
                    .arg(stream_id(*from))
                    .arg("+")
                    .arg("COUNT")
                    .arg(to - from + 1);
            }
            let replies: Vec<StreamRangeReply> =
                pipe.query_async(&mut self.conn).await.map_err(map)?;
            for (r, ((session, _, _), reply)) in ranges.iter().zip(replies).enumerate() {
                // The range also holds the session's other events, which this batch
                // carries whole: only compact deltas are read.
                for entry in reply.ids.iter().filter(|e| e.map.contains_key("d")) {
                    match entry::decode(entry, &self.tenant, Some(session))? {
                        Entry::Event(ev) => {
                            found.insert((r, ev.seq), ev);
                        }
                        Entry::Run(run) => {
                            found.extend(run.into_iter().map(|ev| ((r, ev.seq), ev)));
                        }
                        Entry::Ref { .. } => {}
                    }
                }
            }
        }
        let mut missed = 0;
        for slot in slots {
            match slot {
                Slot::Ready(ev) => self.buf.push_back(Ok(ev)),
                Slot::Wanted(session, seq, count) => {
                    let r = ranges
                        .iter()
                        .position(|r| r.0 == session)
                        .unwrap_or(usize::MAX);
                    for s in seq + 1 - count..=seq {
                        match found.remove(&(r, s)) {
                            Some(ev) => self.buf.push_back(Ok(ev)),
                            None => missed += 1,
                        }
                    }
                }
            }
        }
        Ok(missed)
    }

    async fn next(&mut self) -> Option<Result<BusEvent>> {
        loop {
            if let Some(item) = self.buf.pop_front() {
                return Some(item);
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
            // A session stream's first entry may be a run of deltas that starts at or
            // before the cursor (a resume from a seq inside it): those are delivered.
            let delivered = match self.session {
                Some(_) => seq_of(&self.cursor).unwrap_or(0),
                None => 0,
            };
            let mut slots = Vec::with_capacity(entries.len());
            for entry in entries {
                self.cursor.clone_from(&entry.id);
                match entry::decode(&entry, &self.tenant, self.session.as_ref()) {
                    Ok(Entry::Event(ev)) => slots.push(Slot::Ready(ev)),
                    Ok(Entry::Run(run)) => slots.extend(
                        run.into_iter()
                            .filter(|ev| ev.seq > delivered)
                            .map(Slot::Ready),
                    ),
                    Ok(Entry::Ref {
                        session,
                        seq,
                        count,
                    }) if self.session.is_none() => slots.push(Slot::Wanted(session, seq, count)),
                    Ok(Entry::Ref { .. }) => {
                        self.done = true;
                        return Some(Err(Error::codec(
                            format!("session stream {}, entry {}", self.key, entry.id),
                            "a delta reference, which only a tenant stream holds",
                        )));
                    }
                    Err(e) => {
                        self.done = true;
                        return Some(Err(e));
                    }
                }
            }
            match self.resolve(slots).await {
                // Deltas retention dropped from their session streams before this
                // subscriber read them: reported once the rest of the batch is out.
                Ok(missed) if missed > 0 => {
                    metrics::counter!(forge_core::metrics::BUS_LAGGED, "bus" => "redis")
                        .increment(missed);
                    self.buf.push_back(Err(Error::Lagged { missed }));
                }
                Ok(_) => {}
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
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

/// Most deltas in one run (one session stream entry).
const MAX_RUN: usize = 64;
/// Most bytes of delta text in one run.
const MAX_RUN_TEXT: usize = 4096;

/// A batch laid out as stream entries.
struct Layout<'a> {
    /// The session stream entries: one event each, or a run of deltas (see
    /// [`entry::continues`]), each session's in seq order.
    runs: Vec<Vec<&'a BusEvent>>,
    /// The tenant stream entries, in publishing order: the run holding them and the
    /// last event and count of the events they stand for. An event other than a delta
    /// is one entry; deltas next to each other in the batch that share a run are one
    /// reference.
    tenant: Vec<(usize, &'a BusEvent, usize)>,
}

/// Lays out a batch: each delta joins the run its session has open when it continues
/// it (the same part, the next seq) and the run has room (at most [`MAX_RUN`] deltas,
/// [`MAX_RUN_TEXT`] bytes of text, so `maxlen` still bounds a stream's size); any
/// other event is an entry of its own and ends its session's run. Runs follow each
/// other in the order of their first events, so each session's entries keep its seq
/// order. The tenant stream keeps the batch's order exactly.
fn layout<'a>(batch: &[&'a BusEvent]) -> Layout<'a> {
    let mut runs: Vec<Vec<&'a BusEvent>> = Vec::with_capacity(batch.len());
    let mut text: Vec<usize> = Vec::with_capacity(batch.len());
    let mut tenant: Vec<(usize, &'a BusEvent, usize)> = Vec::with_capacity(batch.len());
    // The session's open run: its index in `runs`.
    let mut open: HashMap<&SessionId, usize> = HashMap::new();
    // The session's highest seq so far in the batch.
    let mut high: HashMap<&SessionId, u64> = HashMap::new();
    let len = |ev: &BusEvent| match &ev.event {
        Event::PartDelta(d) => d.delta.len(),
        _ => 0,
    };
    for &ev in batch {
        let joined = open.get(&ev.session_id).copied().filter(|&i| {
            runs[i].len() < MAX_RUN
                && text[i] + len(ev) <= MAX_RUN_TEXT
                && runs[i]
                    .last()
                    .is_some_and(|last| entry::continues(last, ev))
        });
        let run = match joined {
            Some(i) => {
                runs[i].push(ev);
                text[i] += len(ev);
                i
            }
            None => {
                runs.push(vec![ev]);
                text.push(len(ev));
                let i = runs.len() - 1;
                // A seq at or below one the batch already holds (a bug, or a second
                // writer) is an entry alone that nothing joins: it fails by itself.
                let back = high.get(&ev.session_id).is_some_and(|&h| ev.seq <= h);
                if matches!(ev.event, Event::PartDelta(_)) && !back {
                    open.insert(&ev.session_id, i);
                } else {
                    open.remove(&ev.session_id);
                }
                i
            }
        };
        let h = high.entry(&ev.session_id).or_insert(ev.seq);
        *h = (*h).max(ev.seq);
        match tenant.last_mut() {
            // The batch's previous event is this run's: `ev` follows it in the run.
            Some((i, last, n)) if *i == run && joined.is_some() => {
                *last = ev;
                *n += 1;
            }
            _ => tenant.push((run, ev, 1)),
        }
    }
    Layout { runs, tenant }
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
        let layout = layout(&group);
        invocation.arg(layout.runs.len());
        for run in &layout.runs {
            let (Some(first), Some(last)) = (run.first(), run.last()) else {
                continue;
            };
            // A delta, or a run of them, compact; any other event as its envelope's
            // JSON (the kept text when something in this process produced it).
            let encoded = entry::encode_run(run)?;
            invocation
                .arg(keys.session_stream(&last.tenant, &last.session_id))
                .arg(first.seq)
                .arg(last.seq)
                .arg(encoded.field)
                .arg(encoded.value);
        }
        for (run, last, count) in &layout.tenant {
            // Work streams carry what projector workers apply: sync events only.
            let work = if shards > 1 && matches!(last.event, Event::Sync(_)) {
                keys.work_stream(&last.tenant, shard_of(&last.session_id, shards), shards)
            } else {
                String::new()
            };
            invocation
                .arg(run + 1)
                .arg(keys.tenant_stream(&last.tenant))
                .arg(work)
                .arg(last.session_id.as_str())
                .arg(last.seq)
                .arg(count);
        }
        // Every entry is tried even when one fails (e.g. a seq at or below the
        // stream's last id); the failures are reported to the next flush.
        let refused: Vec<String> = invocation.invoke_async(&mut conn).await.map_err(map)?;
        failed.extend(refused);
    }
    // A deleted session's stream is kept a while for its subscribers to read the
    // deletion, then goes with its keys (prune deletes many sessions over a year).
    for ev in events {
        if let Event::Sync(SyncEvent::SessionDeleted { .. }) = &ev.event {
            let key = keys.session_stream(&ev.tenant, &ev.session_id);
            let _: () = redis::cmd("PEXPIRE")
                .arg(&key)
                .arg(u64::try_from(opts.deleted_stream_ttl.as_millis()).unwrap_or(u64::MAX))
                .query_async(&mut conn)
                .await
                .map_err(map)?;
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Error::backend(
            crate::error::BACKEND,
            false,
            format!(
                "the streams refused {} entr{}: {}",
                failed.len(),
                if failed.len() == 1 { "y" } else { "ies" },
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
                self.follow(key, after, tenant, None).await
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
                self.follow(key, after, tenant, Some(session)).await
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
                match entry::decode(entry, tenant, Some(session))? {
                    Entry::Event(ev) => events.push(ev),
                    // The first entry may be a run that starts before `from_seq`.
                    Entry::Run(run) => {
                        events.extend(run.into_iter().filter(|ev| ev.seq >= from_seq));
                    }
                    Entry::Ref { .. } => {
                        return Err(Error::codec(
                            format!("session stream {key}, entry {}", entry.id),
                            "a delta reference, which only a tenant stream holds",
                        ))
                    }
                }
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
