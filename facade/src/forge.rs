//! [`Forge`]: an opened backend and the operations a platform runs on it.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use forge_core::prune::{PruneOptions, PruneReport, Retention};
use forge_core::store::MAX_PAGE_LIMIT;
use forge_core::{
    read_all, CompactedView, CountingStore, Cursor, Engine, Footprint, MessageId, MessageWithParts,
    OpenItems, Page, Reclaimed, RecoverReport, Session, SessionId, SessionPage, SessionState,
    Store, SyncEvent, TenantId, TenantStats, WriteCounts,
};
use futures::Stream;
use serde::Serialize;

use crate::create::Creating;
use crate::error::{Error, Result};
use crate::replay::{Line, ReplayError, ReplayOptions, ReplayReport, Replayer};
use crate::transfer::{self, Export, ImportedSession};

/// An opened backend: its store, its bus and the projector between them, with the
/// operations of the command line as library calls.
///
/// Cloning is cheap (the parts are shared). `Debug` shows the URL with its password
/// hidden.
#[derive(Clone)]
pub struct Forge {
    engine: Engine,
    url: String,
    /// The store under the engine, when it counts what it is handed.
    counting: Option<Arc<CountingStore>>,
    /// Creators of one session id in this process take turns here.
    creating: Arc<Creating>,
}

impl fmt::Debug for Forge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Forge")
            .field("url", &self.url)
            .field("backend", &self.engine.store.capabilities().name)
            .field("counts_writes", &self.counting.is_some())
            .finish_non_exhaustive()
    }
}

/// The compacted view with what it hides.
#[derive(Clone, Debug, Serialize)]
pub struct ViewReport {
    /// The session.
    pub session: SessionState,
    /// The view the model is sent.
    #[serde(flatten)]
    pub view: CompactedView,
    /// Messages stored in the session.
    pub stored: usize,
    /// Stored messages the view leaves out (behind a compaction boundary).
    pub hidden: usize,
}

/// What [`Forge::stats`] counted.
#[derive(Clone, Debug, Serialize)]
pub struct Stats {
    /// The backend (`redb`, `postgres`, …).
    pub backend: &'static str,
    /// The tenant counted.
    pub tenant: TenantId,
    /// What the tenant stores.
    #[serde(flatten)]
    pub stored: TenantStats,
    /// What the backend occupies, for all tenants.
    pub footprint: Footprint,
}

/// What [`Forge::fork`] made.
#[derive(Clone, Debug, Serialize)]
pub struct Forked {
    /// The new session, as stored.
    pub session: SessionState,
    /// Messages copied.
    pub messages: u64,
    /// Parts copied.
    pub parts: u64,
}

/// What [`Forge::recover`] closed.
#[derive(Clone, Debug)]
pub struct Recovered {
    /// What was open before.
    pub open_before: OpenItems,
    /// What recover did.
    pub report: RecoverReport,
}

/// What [`Forge::import_str`] wrote.
#[derive(Clone, Debug, Serialize)]
pub struct ImportReport {
    /// One entry per session.
    pub sessions: Vec<ImportedSession>,
    /// What reached the store, when the backend was opened with
    /// [`OpenOptions::count_writes`](crate::OpenOptions::count_writes).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub writes: Option<WriteCounts>,
}

impl Forge {
    /// Wraps an engine built by hand (any store, bus and projector).
    pub fn new(engine: Engine) -> Self {
        Self::from_engine(engine, "(engine)".to_owned(), None)
    }

    pub(crate) fn from_engine(
        engine: Engine,
        url: String,
        counting: Option<Arc<CountingStore>>,
    ) -> Self {
        Self {
            engine,
            url,
            counting,
            creating: Arc::default(),
        }
    }

    /// The engine: store, bus and projector, for everything the facade does not wrap
    /// (processors of live turns, subscriptions).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.engine.store
    }

    /// The URL this was opened from, password hidden.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// What reached the store since it was opened, when it was opened with
    /// [`OpenOptions::count_writes`](crate::OpenOptions::count_writes).
    pub fn writes(&self) -> Option<WriteCounts> {
        self.counting.as_ref().map(|c| c.totals())
    }

    /// Commits what the projector holds and returns what reached the store since
    /// `before`.
    async fn written_since(
        &self,
        before: Option<WriteCounts>,
        what: &str,
    ) -> Result<Option<WriteCounts>> {
        self.engine
            .projector
            .sync()
            .await
            .map_err(|e| Error::store(format!("committing the {what}"), e))?;
        Ok(self
            .writes()
            .zip(before)
            .map(|(after, before)| WriteCounts {
                commits: after.commits.saturating_sub(before.commits),
                rows: after.rows.saturating_sub(before.rows),
                bytes: after.bytes.saturating_sub(before.bytes),
                page_reads: after.page_reads.saturating_sub(before.page_reads),
            }))
    }

    /// Delivers what the bus queued (Redis) and commits what a group-commit projector
    /// holds. Call before the process exits.
    ///
    /// # Errors
    /// The bus's or the store's error.
    pub async fn flush(&self) -> Result<()> {
        self.engine
            .projector
            .sync()
            .await
            .map_err(|e| Error::store("committing what the projector holds", e))?;
        self.engine
            .bus
            .flush()
            .await
            .map_err(|e| Error::store("delivering the published events", e))
    }

    /// Flushes as [`Forge::flush`], releases the claims of the sessions this handle
    /// wrote ([`Projector::release`](forge_core::Projector::release)), so their next
    /// writer need not wait out the leases, then closes the store ([`Store::close`]):
    /// redb checkpoints its journal and SQLite its WAL into the database file, so the
    /// file alone holds everything, and connections are closed. Call it once, last,
    /// before the process exits; neither this handle nor its clones may be used
    /// afterwards.
    ///
    /// # Errors
    /// The first error of the flush, the release or the close (the claims are released
    /// and the store is closed either way).
    pub async fn close(&self) -> Result<()> {
        let flushed = self.flush().await;
        let released = self
            .engine
            .projector
            .release()
            .await
            .map_err(|e| Error::store("releasing the claims of the sessions written", e));
        let closed = self
            .engine
            .store
            .close()
            .await
            .map_err(|e| Error::store("closing the store", e));
        flushed.and(released).and(closed)
    }

    /// Replays a recorded stream (JSONL, `docs/replay-format.md`).
    ///
    /// # Errors
    /// [`ReplayError`]: the error (input or store) and what was done before it.
    pub async fn replay_str(
        &self,
        tenant: &TenantId,
        text: &str,
        opts: ReplayOptions,
    ) -> Result<ReplayReport, ReplayError> {
        let before = self.writes();
        // Boxed: a replay's future is large; one allocation per replay keeps the
        // callers' futures small.
        let outcome = Box::pin(Replayer::new(&self.engine, tenant, opts).run_text(text)).await;
        self.finish_replay(before, outcome).await
    }

    /// Replays a recorded stream file (`-` reads standard input).
    ///
    /// # Errors
    /// As [`Forge::replay_str`]; a file that cannot be read is [`Error::Io`].
    pub async fn replay_file(
        &self,
        tenant: &TenantId,
        path: &Path,
        opts: ReplayOptions,
    ) -> Result<ReplayReport, ReplayError> {
        let text = read_input(path).map_err(|error| ReplayError {
            report: ReplayReport::default(),
            error,
        })?;
        self.replay_str(tenant, &text, opts).await
    }

    /// Replays a recorded stream that arrives as text lines (an upload read as it
    /// comes): each `Ok` item is one line of the replay format, processed before the
    /// next is awaited, so subscribers see its deltas while the input is still
    /// arriving. An `Err(message)` item (a line over a size limit, an input that broke
    /// off) is an input error at that line: the replay stops there and the open answer
    /// is closed as on any bad line. Errors name the item as `line N`.
    ///
    /// # Errors
    /// As [`Forge::replay_str`].
    pub async fn replay_lines<S>(
        &self,
        tenant: &TenantId,
        lines: S,
        opts: ReplayOptions,
    ) -> Result<ReplayReport, ReplayError>
    where
        S: Stream<Item = std::result::Result<String, String>>,
    {
        let before = self.writes();
        // Boxed: a replay's future is large; one allocation per replay keeps the
        // callers' futures small.
        let outcome = Box::pin(Replayer::new(&self.engine, tenant, opts).run_lines(lines)).await;
        self.finish_replay(before, outcome).await
    }

    /// Replays any stream of lines: framing lines and model stream events
    /// (`Line::from(StreamEvent)`). Errors name the item as `event N`.
    ///
    /// # Errors
    /// As [`Forge::replay_str`].
    pub async fn replay_stream<S>(
        &self,
        tenant: &TenantId,
        lines: S,
        opts: ReplayOptions,
    ) -> Result<ReplayReport, ReplayError>
    where
        S: Stream<Item = Line>,
    {
        let before = self.writes();
        // Boxed: a replay's future is large; one allocation per replay keeps the
        // callers' futures small.
        let outcome = Box::pin(Replayer::new(&self.engine, tenant, opts).run_stream(lines)).await;
        self.finish_replay(before, outcome).await
    }

    /// Commits what the projector holds and fills in what the replay wrote.
    async fn finish_replay(
        &self,
        before: Option<WriteCounts>,
        outcome: Result<ReplayReport, ReplayError>,
    ) -> Result<ReplayReport, ReplayError> {
        let written = self.written_since(before, "replay").await;
        match (outcome, written) {
            (Ok(mut report), Ok(writes)) => {
                report.writes = writes;
                Ok(report)
            }
            (Ok(report), Err(error)) => Err(ReplayError { report, error }),
            (Err(mut e), written) => {
                e.report.writes = written.ok().flatten();
                Err(e)
            }
        }
    }

    /// Imports sessions in the opencode export shape: one export document
    /// `{info, messages: [{info, parts}]}`, or one `{info, parts}` message per line.
    /// Ids, times and unknown fields are kept; a message or part whose id is stored
    /// already is overwritten (counted as `replaced`). `progress(done, total)` is
    /// called after each session's batch, in messages.
    ///
    /// All or nothing: the whole input is parsed and checked before anything is
    /// written, each session is written as one batch (which every backend applies
    /// whole or not at all), and if a session's batch fails, the sessions this call
    /// wrote before it are taken back — a session it created is deleted; in a session
    /// that existed, the messages it added are removed and those it overwrote are put
    /// back as they were. Nothing that existed before is deleted. Subscribers of the
    /// bus see the writes and then their undoing. Concurrent writers to the same
    /// sessions are not isolated from an import.
    ///
    /// # Errors
    /// [`Error::Input`] naming the bad line or item (nothing is stored);
    /// [`Error::Store`] when writing fails (nothing is stored; if taking back failed
    /// too, the error says so and names the sessions that keep what was written).
    pub async fn import_str(
        &self,
        tenant: &TenantId,
        text: &str,
        progress: &(dyn Fn(usize, usize) + Sync),
    ) -> Result<ImportReport> {
        let before = self.writes();
        let sessions = transfer::import(&self.engine, tenant, text, progress).await?;
        let writes = self.written_since(before, "import").await?;
        Ok(ImportReport { sessions, writes })
    }

    /// Imports a file (`-` reads standard input); see [`Forge::import_str`].
    ///
    /// # Errors
    /// As [`Forge::import_str`], and [`Error::Io`].
    pub async fn import_file(
        &self,
        tenant: &TenantId,
        path: &Path,
        progress: &(dyn Fn(usize, usize) + Sync),
    ) -> Result<ImportReport> {
        let text = read_input(path)?;
        self.import_str(tenant, &text, progress).await
    }

    /// A whole session in the opencode export shape.
    ///
    /// # Errors
    /// [`Error::SessionNotFound`], or the store's error.
    pub async fn export(&self, tenant: &TenantId, session: &SessionId) -> Result<Export> {
        transfer::export(&self.engine, tenant, session).await
    }

    /// The sessions of a tenant.
    ///
    /// # Errors
    /// The store's error.
    pub async fn sessions(&self, tenant: &TenantId) -> Result<Vec<SessionState>> {
        self.engine
            .store
            .sessions(tenant)
            .await
            .map_err(|e| Error::store(format!("listing the sessions of tenant {tenant}"), e))
    }

    /// A page of the sessions of a tenant in id order, after `after` (from the first
    /// when `None`); its `next` continues. The cost grows with `limit`, not with the
    /// tenant.
    ///
    /// # Errors
    /// The store's error.
    pub async fn sessions_after(
        &self,
        tenant: &TenantId,
        after: Option<&SessionId>,
        limit: usize,
    ) -> Result<SessionPage> {
        self.engine
            .store
            .sessions_after(tenant, after, limit)
            .await
            .map_err(|e| Error::store(format!("listing the sessions of tenant {tenant}"), e))
    }

    /// Finds the parts of the tenant whose text holds every word of `query`, best first
    /// ([`Store::search`]; [`forge_core::search`] states the rule), as the history
    /// shows them: a part a session's revert mark hides is not found.
    ///
    /// # Errors
    /// [`Error::Input`] for a query without words, [`Error::SessionNotFound`] for an
    /// unknown `query.session`, or the store's error (a database opened with
    /// `search=off` fails as unsupported).
    pub async fn search(
        &self,
        tenant: &TenantId,
        query: &forge_core::SearchQuery,
    ) -> Result<Vec<forge_core::SearchHit>> {
        query.words().map_err(|e| Error::Input {
            at: "query".into(),
            message: e.to_string(),
            source: None,
        })?;
        if let Some(s) = &query.session {
            self.session(tenant, s).await?;
        }
        let store = &self.engine.store;
        let find = |q: forge_core::SearchQuery| async move {
            store
                .search(tenant, &q)
                .await
                .map_err(|e| Error::store(format!("searching tenant {tenant} for {:?}", q.text), e))
        };
        let hits = find(query.clone()).await?;
        let full = hits.len() == query.limit();
        let (mut kept, hidden) = self.unhidden(tenant, hits).await?;
        if hidden && full && query.limit() < forge_core::search::MAX_SEARCH_LIMIT {
            // Hidden hits took places: ask for every hit and keep the best visible ones.
            let mut all = query.clone();
            all.limit = forge_core::search::MAX_SEARCH_LIMIT;
            kept = self.unhidden(tenant, find(all).await?).await?.0;
            kept.truncate(query.limit());
        }
        Ok(kept)
    }

    /// `hits` without the parts a revert mark hides, and whether there were any.
    async fn unhidden(
        &self,
        tenant: &TenantId,
        hits: Vec<forge_core::SearchHit>,
    ) -> Result<(Vec<forge_core::SearchHit>, bool)> {
        let mut marks: std::collections::HashMap<SessionId, Option<forge_core::revert::Mark>> =
            std::collections::HashMap::new();
        let mut kept = Vec::with_capacity(hits.len());
        let mut hidden = false;
        for h in hits {
            if !marks.contains_key(&h.session_id) {
                let mark = self
                    .engine
                    .store
                    .session(tenant, &h.session_id)
                    .await
                    .map_err(|e| Error::store(format!("reading session {}", h.session_id), e))?
                    .and_then(|s| forge_core::revert::mark(&s.info));
                marks.insert(h.session_id.clone(), mark);
            }
            let hides = marks
                .get(&h.session_id)
                .and_then(Option::as_ref)
                .is_some_and(|m| forge_core::revert::hides(m, &h.message_id, &h.part_id));
            if hides {
                hidden = true;
            } else {
                kept.push(h);
            }
        }
        Ok((kept, hidden))
    }

    /// What a tenant stores ([`Store::stats`]) and what the backend occupies for all
    /// tenants ([`Store::footprint`]).
    ///
    /// # Errors
    /// The store's error.
    pub async fn stats(&self, tenant: &TenantId) -> Result<Stats> {
        let store = &self.engine.store;
        let counted = store
            .stats(tenant)
            .await
            .map_err(|e| Error::store(format!("counting what tenant {tenant} stores"), e))?;
        let footprint = store
            .footprint()
            .await
            .map_err(|e| Error::store("measuring what the backend occupies", e))?;
        Ok(Stats {
            backend: store.capabilities().name,
            tenant: tenant.clone(),
            stored: counted,
            footprint,
        })
    }

    /// Gives back the space deletions freed ([`Store::reclaim`]): redb compacts its
    /// file, SQLite runs its incremental vacuum in steps, Postgres vacuums its tables.
    ///
    /// # Errors
    /// The store's error.
    pub async fn reclaim(&self) -> Result<Reclaimed> {
        self.engine
            .store
            .reclaim()
            .await
            .map_err(|e| Error::store("giving space back", e))
    }

    /// Applies a retention policy to a tenant ([`forge_core::prune`]): deletes the
    /// sessions it no longer keeps and the compacted history it lets go, in small
    /// transactions, publishing the deletions on the bus; sessions held by a writer,
    /// with something open, or written while it runs are left alone.
    ///
    /// # Errors
    /// The store's or the bus's error (what was removed before it stays removed).
    pub async fn prune(
        &self,
        tenant: &TenantId,
        retention: &Retention,
        opts: &PruneOptions,
    ) -> Result<PruneReport> {
        forge_core::prune::prune(
            &self.engine.store,
            &self.engine.bus,
            tenant,
            retention,
            opts,
        )
        .await
        .map_err(|e| Error::store(format!("pruning tenant {tenant}"), e))
    }

    /// One session.
    ///
    /// # Errors
    /// [`Error::SessionNotFound`], or the store's error.
    pub async fn session(&self, tenant: &TenantId, session: &SessionId) -> Result<SessionState> {
        require_session(&self.engine, tenant, session).await
    }

    /// Creates a session (a fresh `ses_…` id unless `session.id` is given by the caller
    /// and free) and returns it as stored.
    ///
    /// Of concurrent creators of one id, in this process or in others writing to the
    /// same database, one creates the session and every other fails: the session is
    /// claimed first ([`forge_core::fence`]), then checked to be absent and written
    /// under that claim, while creators in this process take turns. A creator in
    /// another process is refused the claim ([`Error::Store`] with a `Held` source
    /// naming the holder), or, when it takes the session over, fences this one's write
    /// (a `Fenced` source) and then finds the session if it was written before.
    ///
    /// # Errors
    /// [`Error::Store`] with a `Conflict` source when a session with the id exists, a
    /// `Held` or `Fenced` source when another writer holds the session or took it over;
    /// [`Error::Input`] for an id that breaks the id rules, or the store's error.
    pub async fn create_session(
        &self,
        tenant: &TenantId,
        session: Session,
    ) -> Result<SessionState> {
        let id = session.id.clone();
        id.check()
            .map_err(|e| Error::input("session id", e.to_string()))?;
        let creating = |e| Error::store(format!("creating session {id}"), e);
        let _turn = self.creating.lock(tenant, &id).await;
        // The claim comes before the check: a write by anyone else after the check needs
        // a later claim, which fences this creator's write.
        let scope = self.engine.scope(tenant, &id).await.map_err(creating)?;
        let exists = self
            .engine
            .store
            .session(tenant, &id)
            .await
            .map_err(|e| Error::store(format!("reading session {id}"), e))?;
        if exists.is_some() {
            return Err(Error::store(
                format!("creating session {id}"),
                forge_core::Error::conflict(format!("session {id} exists already")),
            ));
        }
        self.engine
            .projector
            .commit(&scope, vec![SyncEvent::SessionUpdated { info: session }])
            .await
            .map_err(creating)?;
        self.flush().await?;
        require_session(&self.engine, tenant, &id).await
    }

    /// Forks `source` at `point` ([`forge_core::fork`]): a new session holding a copy of
    /// its history up to the point (new ids, `parentID` and `forkedFrom` naming the
    /// source), committed as one batch; subscribers see the new session's rows after the
    /// commit. The two sessions are independent afterwards.
    ///
    /// # Errors
    /// [`Error::SessionNotFound`] for an unknown source, [`Error::MessageNotFound`] for
    /// a point that is not one of its messages, or the store's error.
    pub async fn fork(
        &self,
        tenant: &TenantId,
        source: &SessionId,
        point: &forge_core::fork::ForkPoint,
    ) -> Result<Forked> {
        self.session(tenant, source).await?;
        let plan = forge_core::fork::plan(
            self.engine.store.as_ref(),
            tenant,
            source,
            point,
            forge_core::id::now_ms(),
        )
        .await
        .map_err(|e| match (&e, point) {
            (
                forge_core::Error::NotFound {
                    what: "message", ..
                },
                forge_core::fork::ForkPoint::Through(m) | forge_core::fork::ForkPoint::Before(m),
            ) => Error::MessageNotFound {
                session: source.clone(),
                message: m.clone(),
            },
            _ => Error::store(format!("reading session {source} to fork it"), e),
        })?;
        let doing = format!("forking {source} into");
        let session = self
            .write_session(tenant, &plan.session.id, plan.events, &doing)
            .await?;
        Ok(Forked {
            session,
            messages: plan.messages,
            parts: plan.parts,
        })
    }

    /// Deletes a session with its messages and parts; subscribers see
    /// `session.deleted`.
    ///
    /// # Errors
    /// [`Error::SessionNotFound`], or the store's error.
    pub async fn delete_session(&self, tenant: &TenantId, session: &SessionId) -> Result<()> {
        self.session(tenant, session).await?;
        let scope = self
            .engine
            .scope(tenant, session)
            .await
            .map_err(|e| Error::store(format!("deleting session {session}"), e))?;
        self.engine
            .projector
            .commit(
                &scope,
                vec![SyncEvent::SessionDeleted {
                    session_id: session.clone(),
                }],
            )
            .await
            .map_err(|e| Error::store(format!("deleting session {session}"), e))?;
        self.flush().await
    }

    /// One message of a session with its parts.
    ///
    /// # Errors
    /// [`Error::SessionNotFound`], [`Error::MessageNotFound`], or the store's error.
    pub async fn message(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        message: &MessageId,
    ) -> Result<MessageWithParts> {
        self.session(tenant, session).await?;
        self.engine
            .store
            .message(tenant, session, message)
            .await
            .map_err(|e| Error::store(format!("reading message {message}"), e))?
            .ok_or_else(|| Error::MessageNotFound {
                session: session.clone(),
                message: message.clone(),
            })
    }

    /// One page of a session's history: the newest page first, messages oldest to
    /// newest inside it, and the cursor of the next (older) page. `limit` is capped
    /// at [`MAX_PAGE_LIMIT`].
    ///
    /// # Errors
    /// [`Error::SessionNotFound`], or the store's error.
    pub async fn history(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        before: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page> {
        self.session(tenant, session).await?;
        self.engine
            .history(tenant, session, before, limit)
            .await
            .map_err(|e| Error::store(format!("reading the history of session {session}"), e))
    }

    /// Every message of a session, oldest first.
    ///
    /// # Errors
    /// [`Error::SessionNotFound`], or the store's error.
    pub async fn history_all(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> Result<Vec<MessageWithParts>> {
        let state = self.session(tenant, session).await?;
        let all = self.stored_history(tenant, session).await?;
        Ok(match forge_core::revert::mark(&state.info) {
            Some(mark) => forge_core::revert::visible(all, &mark),
            None => all,
        })
    }

    /// Marks a revert point ([`forge_core::revert`], opencode's `revert`): `message` and
    /// what follows it (with `part`: that message's parts from `part` on, and the later
    /// messages) are hidden from the view and the history until [`Forge::unrevert`]
    /// shows them again or [`Forge::revert_commit`] — or the next user message — drops
    /// them. A new mark replaces the old one.
    ///
    /// # Errors
    /// [`Error::SessionNotFound`], [`Error::MessageNotFound`] (also for a part the
    /// message does not hold), or the store's error.
    pub async fn revert(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        message: &MessageId,
        part: Option<&forge_core::PartId>,
    ) -> Result<SessionState> {
        let state = self.session(tenant, session).await?;
        let history = self.stored_history(tenant, session).await?;
        let mark = forge_core::revert::Mark {
            message: message.clone(),
            part: part.cloned(),
        };
        forge_core::revert::check(&history, session, &mark).map_err(|_| {
            Error::MessageNotFound {
                session: session.clone(),
                message: message.clone(),
            }
        })?;
        let mut info = state.info;
        forge_core::revert::set(&mut info, Some(&mark));
        self.write_session(
            tenant,
            session,
            vec![SyncEvent::SessionUpdated { info }],
            "reverting",
        )
        .await
    }

    /// Clears a revert mark: everything is shown again (opencode's `unrevert`). A
    /// session without one is left as it is.
    ///
    /// # Errors
    /// [`Error::SessionNotFound`], or the store's error.
    pub async fn unrevert(&self, tenant: &TenantId, session: &SessionId) -> Result<SessionState> {
        let state = self.session(tenant, session).await?;
        if forge_core::revert::mark(&state.info).is_none() {
            return Ok(state);
        }
        let mut info = state.info;
        forge_core::revert::set(&mut info, None);
        self.write_session(
            tenant,
            session,
            vec![SyncEvent::SessionUpdated { info }],
            "restoring",
        )
        .await
    }

    /// Drops what a revert mark hides and clears the mark, in one batch. A session
    /// without one is left as it is.
    ///
    /// # Errors
    /// [`Error::SessionNotFound`], or the store's error.
    pub async fn revert_commit(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> Result<SessionState> {
        let state = self.session(tenant, session).await?;
        let Some(mark) = forge_core::revert::mark(&state.info) else {
            return Ok(state);
        };
        let history = self.stored_history(tenant, session).await?;
        let events = forge_core::revert::commit(&state.info, &history, &mark);
        self.write_session(tenant, session, events, "committing the revert of")
            .await
    }

    /// Every stored message of `session` (a revert mark not applied).
    async fn stored_history(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> Result<Vec<MessageWithParts>> {
        read_all(self.engine.store.as_ref(), tenant, session, MAX_PAGE_LIMIT)
            .await
            .map_err(|e| Error::store(format!("reading the history of session {session}"), e))
    }

    //// Commits `events` to `session` through the projector and reads it back.
    async fn write_session(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        events: Vec<SyncEvent>,
        doing: &str,
    ) -> Result<SessionState> {
        let failed = |e| Error::store(format!("{doing} session {session}"), e);
        let scope = self.engine.scope(tenant, session).await.map_err(failed)?;
        self.engine
            .projector
            .commit(&scope, events)
            .await
            .map_err(failed)?;
        self.flush().await?;
        require_session(&self.engine, tenant, session).await
    }

    /// The compacted view: what the model is sent next turn. It reads only what is
    /// after the last compaction boundary.
    ///
    /// # Errors
    /// [`Error::SessionNotFound`], or the store's error.
    pub async fn view(&self, tenant: &TenantId, session: &SessionId) -> Result<CompactedView> {
        self.session(tenant, session).await?;
        self.engine
            .view(tenant, session)
            .await
            .map_err(|e| Error::store(format!("reading the view of session {session}"), e))
    }

    /// The next request, rebuilt from the store: the compacted view as the AI SDK's
    /// `ModelMessage[]` (what `streamText({ messages })` takes), in the shapes of `sdk`.
    /// See [`forge_core::ai_sdk::model_messages`].
    ///
    /// # Errors
    /// As [`Forge::view`].
    pub async fn model_messages(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        sdk: forge_core::ai_sdk::AiSdk,
    ) -> Result<Vec<serde_json::Value>> {
        let view = self.view(tenant, session).await?;
        Ok(forge_core::ai_sdk::model_messages(&view.messages, sdk))
    }

    /// The compacted view as the AI SDK's `UIMessage[]` (what `useChat` renders). See
    /// [`forge_core::ai_sdk::ui_messages`].
    ///
    /// # Errors
    /// As [`Forge::view`].
    pub async fn ui_messages(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        sdk: forge_core::ai_sdk::AiSdk,
    ) -> Result<Vec<serde_json::Value>> {
        let view = self.view(tenant, session).await?;
        Ok(forge_core::ai_sdk::ui_messages(&view.messages, sdk))
    }

    /// The compacted view with the session and how many stored messages it hides
    /// (reads the whole history to count them).
    ///
    /// # Errors
    /// As [`Forge::view`].
    pub async fn view_report(&self, tenant: &TenantId, session: &SessionId) -> Result<ViewReport> {
        // One existence check, then the two reads.
        let state = self.session(tenant, session).await?;
        let read = |e| Error::store(format!("reading session {session}"), e);
        let view = self.engine.view(tenant, session).await.map_err(read)?;
        let stored = read_all(self.engine.store.as_ref(), tenant, session, MAX_PAGE_LIMIT)
            .await
            .map_err(read)?
            .len();
        Ok(ViewReport {
            session: state,
            hidden: stored.saturating_sub(view.messages.len()),
            stored,
            view,
        })
    }

    /// Closes what a crash left open in one session, or in the whole tenant.
    /// Idempotent: a second run closes nothing.
    ///
    /// # Errors
    /// [`Error::SessionNotFound`] for a named session that does not exist, or the
    /// store's error.
    pub async fn recover(
        &self,
        tenant: &TenantId,
        session: Option<&SessionId>,
    ) -> Result<Recovered> {
        if let Some(sid) = session {
            self.session(tenant, sid).await?;
        }
        let open_before = self
            .engine
            .store
            .open_items(tenant, session)
            .await
            .map_err(|e| Error::store("reading what is open", e))?;
        let report = self
            .engine
            .recover(tenant, session)
            .await
            .map_err(|e| Error::store("recover", e))?;
        Ok(Recovered {
            open_before,
            report,
        })
    }
}

/// The session, or [`Error::SessionNotFound`].
pub(crate) async fn require_session(
    engine: &Engine,
    tenant: &TenantId,
    session: &SessionId,
) -> Result<SessionState> {
    engine
        .store
        .session(tenant, session)
        .await
        .map_err(|e| Error::store(format!("reading session {session}"), e))?
        .ok_or_else(|| Error::SessionNotFound {
            tenant: tenant.clone(),
            session: session.clone(),
        })
}

/// Reads `path`, or standard input for `-`.
pub(crate) fn read_input(path: &Path) -> Result<String> {
    use std::io::Read;
    let io = |source| Error::Io {
        action: "read",
        path: path.to_owned(),
        source,
    };
    if path == Path::new("-") {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).map_err(io)?;
        return Ok(s);
    }
    std::fs::read_to_string(path).map_err(io)
}
