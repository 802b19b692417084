//! `follow`: a live bridge from a running `opencode serve` into any forge-store backend.
//!
//! It listens to opencode's `GET /event` and stores every session, message and part
//! opencode publishes through the engine's projector — so each gets forge-store's
//! `seq` and subscribers of forge-store's bus see it — while `message.part.delta`,
//! `session.status`, `session.idle` and `session.error` are re-published on the bus and
//! never stored. On every (re)connection it first subscribes, then backfills from
//! `GET /session` and `GET /session/{id}/message`: rows that differ from what is stored
//! are written, messages and parts opencode no longer has are removed, equal rows are
//! left alone; then the events that arrived meanwhile are applied. A dropped connection
//! is retried after a delay, so nothing is missed and nothing is stored twice.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use forge_store::model::{Message, Part, Session};
use forge_store::{
    ErrorKind, Event, Forge, MessageId, MessageWithParts, PartId, SessionId, SyncEvent, TenantId,
};
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::{mpsc, watch};

use crate::api::encode_query;
use crate::shutting_down;

/// What to follow.
#[derive(Clone, Debug)]
pub struct FollowOptions {
    /// opencode's base URL (`http://127.0.0.1:4096`).
    pub url: String,
    /// Only this session (and its events).
    pub session: Option<SessionId>,
    /// opencode's project directory (its `/event` carries one directory's events; the
    /// server's own by default).
    pub directory: Option<String>,
    /// A value for the `Authorization` header (opencode's `OPENCODE_SERVER_PASSWORD`
    /// makes it ask for Basic auth).
    pub authorization: Option<String>,
    /// How long to wait before reconnecting after the connection dropped.
    pub reconnect_delay: Duration,
}

impl FollowOptions {
    /// Follows every session of `url`, reconnecting after 1 s.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into().trim_end_matches('/').to_owned(),
            session: None,
            directory: None,
            authorization: None,
            reconnect_delay: Duration::from_secs(1),
        }
    }
}

/// What a follow did (so far).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct FollowReport {
    /// Connections made to `/event` (1 + reconnections).
    pub connections: u64,
    /// Rows written by backfills (sessions, messages, parts that differed).
    pub backfilled: u64,
    /// Rows removed by backfills (gone from opencode while the connection was down).
    pub removed: u64,
    /// Sync events stored from the live stream.
    pub stored: u64,
    /// Deltas and statuses re-published on the bus.
    pub published: u64,
    /// Events of other types (or other sessions) passed over.
    pub ignored: u64,
}

/// Why following stopped.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// opencode answered something this cannot use, or storing failed.
    #[error("{0}")]
    Failed(String),
}

fn fail(what: impl std::fmt::Display) -> FollowError {
    FollowError::Failed(what.to_string())
}

/// Follows until `shutdown` flips (then returns what it did) or a store write fails.
/// Connection failures are logged and retried.
///
/// Sessions are written through the forge's projector, which claims each one for its
/// writer ([`forge_store::fence`]): a session another writer holds stops following with
/// an error naming the holder, unless the forge was opened to wait for it or take it
/// over ([`forge_store::OpenOptions::claims`]).
///
/// # Errors
/// [`FollowError`] when the store refuses a write (what opencode sent does not fit what
/// is stored, or the backend failed), or another writer holds a session followed or
/// took it over.
pub async fn follow(
    forge: &Forge,
    tenant: &TenantId,
    opts: &FollowOptions,
    shutdown: watch::Receiver<bool>,
    report: &mut FollowReport,
) -> Result<(), FollowError> {
    let http = reqwest::Client::new();
    let mut bridge = Bridge {
        forge,
        tenant,
        opts,
        http: &http,
        report,
        held: None,
    };
    let down = shutting_down(shutdown);
    tokio::pin!(down);
    loop {
        let outcome = tokio::select! {
            r = bridge.connection() => r,
            () = &mut down => return Ok(()),
        };
        let why = match outcome {
            Ok(()) => "opencode's event stream ended".to_owned(),
            Err(Retry(e)) => e,
        };
        if let Some(held) = bridge.held.take() {
            // Another writer holds a session followed (or took it over): reconnecting
            // cannot change that.
            bridge.forge.flush().await.map_err(fail)?;
            return Err(held);
        }
        tracing::warn!(url = %opts.url, %why, "following opencode: reconnecting");
        bridge.forge.flush().await.map_err(fail)?;
        tokio::select! {
            () = tokio::time::sleep(opts.reconnect_delay) => {}
            () = &mut down => return Ok(()),
        }
    }
}

/// A connection problem: retried.
struct Retry(String);

struct Bridge<'a> {
    forge: &'a Forge,
    tenant: &'a TenantId,
    opts: &'a FollowOptions,
    http: &'a reqwest::Client,
    report: &'a mut FollowReport,
    /// Set when another writer holds a session followed, or took it over: following
    /// stops with it instead of reconnecting.
    held: Option<FollowError>,
}

impl Bridge<'_> {
    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        let mut url = format!("{}{path}", self.opts.url);
        if let Some(dir) = &self.opts.directory {
            url.push(if url.contains('?') { '&' } else { '?' });
            url.push_str("directory=");
            url.push_str(&encode_query(dir));
        }
        let mut req = self.http.get(url);
        if let Some(auth) = &self.opts.authorization {
            req = req.header("Authorization", auth);
        }
        req
    }

    async fn json(&self, path: &str) -> Result<Value, Retry> {
        let r = self
            .get(path)
            .send()
            .await
            .map_err(|e| Retry(format!("GET {path}: {e}")))?;
        if !r.status().is_success() {
            return Err(Retry(format!("GET {path}: {}", r.status())));
        }
        r.json()
            .await
            .map_err(|e| Retry(format!("GET {path}: {e}")))
    }

    /// One connection: subscribe, backfill, then apply events until the stream ends.
    /// A failed store write ends the connection like a network error: it is logged and
    /// retried, and the next connection's backfill repairs what it left.
    async fn connection(&mut self) -> Result<(), Retry> {
        let r = self
            .get("/event")
            .send()
            .await
            .map_err(|e| Retry(format!("GET /event: {e}")))?;
        if !r.status().is_success() {
            return Err(Retry(format!("GET /event: {}", r.status())));
        }
        self.report.connections += 1;
        // Read events into a queue while the backfill runs.
        let (tx, mut rx) = mpsc::unbounded_channel::<Result<Value, String>>();
        let mut body = r.bytes_stream();
        let reader = tokio::spawn(async move {
            let mut buf = String::new();
            while let Some(chunk) = body.next().await {
                let bytes = match chunk {
                    Ok(b) => b,
                    Err(e) => {
                        let _ = tx.send(Err(e.to_string()));
                        return;
                    }
                };
                buf.push_str(&String::from_utf8_lossy(&bytes));
                while let Some(pos) = buf.find("\n\n") {
                    let frame: String = buf.drain(..pos + 2).collect();
                    let data: String = frame
                        .lines()
                        .filter_map(|l| l.strip_prefix("data:"))
                        .map(str::trim_start)
                        .collect::<Vec<_>>()
                        .join("\n");
                    if data.is_empty() {
                        continue;
                    }
                    let parsed = serde_json::from_str(&data).map_err(|e| e.to_string());
                    if tx.send(parsed).is_err() {
                        return;
                    }
                }
            }
        });
        let _stop_reader = AbortOnDrop(reader);
        self.backfill().await?;
        while let Some(item) = rx.recv().await {
            let event = item.map_err(|e| Retry(format!("reading /event: {e}")))?;
            self.apply(event).await?;
        }
        Ok(())
    }

    fn wanted(&self, session: &SessionId) -> bool {
        self.opts.session.as_ref().is_none_or(|s| s == session)
    }

    /// Brings the store up to what opencode lists now.
    async fn backfill(&mut self) -> Result<(), Retry> {
        let sessions: Vec<Session> = match &self.opts.session {
            Some(id) => {
                let one = self
                    .json(&format!("/session/{}", encode_query(id.as_str())))
                    .await?;
                vec![parse(one, "a session")?]
            }
            None => parse(self.json("/session").await?, "the session list")?,
        };
        for info in sessions {
            let id = info.id.clone();
            let stored = self
                .forge
                .store()
                .session(self.tenant, &id)
                .await
                .map_err(|e| Retry(format!("reading session {id}: {e}")))?;
            let mut events = Vec::new();
            if stored.as_ref().is_none_or(|s| !same(&s.info, &info)) {
                events.push(SyncEvent::SessionUpdated { info });
            }
            let theirs: Vec<MessageWithParts> = parse(
                self.json(&format!("/session/{}/message", encode_query(id.as_str())))
                    .await?,
                "a message list",
            )?;
            let ours = if stored.is_some() {
                self.forge
                    .history_all(self.tenant, &id)
                    .await
                    .map_err(|e| Retry(format!("reading session {id}: {e}")))?
            } else {
                Vec::new()
            };
            let (writes, removals) = diff(&id, &ours, theirs);
            self.report.backfilled += writes.len() as u64;
            self.report.removed += removals.len() as u64;
            events.extend(removals);
            events.extend(writes);
            if !events.is_empty() {
                self.commit(&id, events).await?;
            }
        }
        self.forge
            .flush()
            .await
            .map_err(|e| Retry(format!("committing the backfill: {e}")))
    }

    async fn commit(&mut self, session: &SessionId, events: Vec<SyncEvent>) -> Result<(), Retry> {
        let engine = self.forge.engine();
        let scope = match engine.scope(self.tenant, session).await {
            Ok(scope) => scope,
            Err(e) => return Err(self.refused(format!("session {session}: {e}"), &e)),
        };
        match engine.projector.commit(&scope, events).await {
            Ok(_) => Ok(()),
            Err(e) => Err(self.refused(format!("storing into session {session}: {e}"), &e)),
        }
    }

    /// A write that failed with `e`: retried after reconnecting, unless another writer
    /// holds the session or took it over, which stops following.
    fn refused(&mut self, what: String, e: &forge_store::CoreError) -> Retry {
        if matches!(e.kind(), ErrorKind::Held | ErrorKind::Fenced) {
            self.held = Some(fail(&what));
        }
        Retry(what)
    }

    /// One live event.
    async fn apply(&mut self, raw: Value) -> Result<(), Retry> {
        let kind = raw["type"].as_str().unwrap_or_default().to_owned();
        // opencode's `session.created` carries the new session: store it as an update.
        let raw = if kind == "session.created" {
            let mut r = raw;
            r["type"] = Value::String("session.updated".into());
            r
        } else {
            raw
        };
        let event: Event = match serde_json::from_value(raw) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(%kind, error = %e, "an opencode event that does not fit; skipped");
                self.report.ignored += 1;
                return Ok(());
            }
        };
        match event {
            Event::Sync(_) => self.store_event(event).await,
            Event::PartDelta(_)
            | Event::SessionStatus(_)
            | Event::SessionIdle { .. }
            | Event::SessionError(_) => self.publish(event).await,
            Event::Other { .. } => {
                self.report.ignored += 1;
                Ok(())
            }
        }
    }

    async fn store_event(&mut self, event: Event) -> Result<(), Retry> {
        let Event::Sync(sync) = event else {
            return Ok(());
        };
        let session = sync.session_id().clone();
        if !self.wanted(&session) || session.as_str().is_empty() {
            self.report.ignored += 1;
            return Ok(());
        }
        self.commit(&session, vec![sync]).await?;
        self.report.stored += 1;
        Ok(())
    }

    async fn publish(&mut self, event: Event) -> Result<(), Retry> {
        let session = match &event {
            Event::PartDelta(d) => d.session_id.clone(),
            Event::SessionIdle { session_id } => session_id.clone(),
            Event::SessionStatus(m) | Event::SessionError(m) => SessionId::from(
                m.get("sessionID")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
            ),
            _ => return Ok(()),
        };
        if !self.wanted(&session) || session.as_str().is_empty() {
            self.report.ignored += 1;
            return Ok(());
        }
        let engine = self.forge.engine();
        let scope = match engine.scope(self.tenant, &session).await {
            Ok(scope) => scope,
            Err(e) => return Err(self.refused(format!("session {session}: {e}"), &e)),
        };
        engine
            .projector
            .emit(&scope, event)
            .map_err(|e| Retry(format!("publishing to session {session}: {e}")))?;
        self.report.published += 1;
        Ok(())
    }
}

/// The writes and removals that make `ours` equal `theirs` (removals first: a part
/// may move to another message).
fn diff(
    session: &SessionId,
    ours: &[MessageWithParts],
    theirs: Vec<MessageWithParts>,
) -> (Vec<SyncEvent>, Vec<SyncEvent>) {
    let stored: HashMap<&MessageId, &MessageWithParts> =
        ours.iter().map(|m| (&m.info.id, m)).collect();
    let their_messages: HashSet<MessageId> = theirs.iter().map(|m| m.info.id.clone()).collect();
    let their_parts: HashSet<PartId> = theirs
        .iter()
        .flat_map(|m| m.parts.iter().map(|p| p.id.clone()))
        .collect();
    let mut removals = Vec::new();
    for m in ours {
        if !their_messages.contains(&m.info.id) {
            removals.push(SyncEvent::MessageRemoved {
                session_id: session.clone(),
                message_id: m.info.id.clone(),
            });
            continue;
        }
        for p in &m.parts {
            if !their_parts.contains(&p.id) {
                removals.push(SyncEvent::PartRemoved {
                    session_id: session.clone(),
                    message_id: m.info.id.clone(),
                    part_id: p.id.clone(),
                });
            }
        }
    }
    let mut writes = Vec::new();
    for m in theirs {
        let ours = stored.get(&m.info.id);
        if ours.is_none_or(|o| !same::<Message>(&o.info, &m.info)) {
            writes.push(SyncEvent::MessageUpdated {
                info: m.info.clone(),
            });
        }
        let our_parts: HashMap<&PartId, &Part> = ours
            .map(|o| o.parts.iter().map(|p| (&p.id, p)).collect())
            .unwrap_or_default();
        for p in m.parts {
            if our_parts.get(&p.id).is_none_or(|o| !same::<Part>(o, &p)) {
                writes.push(SyncEvent::PartUpdated { part: p });
            }
        }
    }
    (writes, removals)
}

/// Equal as JSON (key order aside).
fn same<T: serde::Serialize>(a: &T, b: &T) -> bool {
    match (serde_json::to_value(a), serde_json::to_value(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn parse<T: serde::de::DeserializeOwned>(v: Value, what: &str) -> Result<T, Retry> {
    serde_json::from_value(v)
        .map_err(|e| Retry(format!("opencode sent {what} that does not fit: {e}")))
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
