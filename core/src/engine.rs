//! `Engine`: a store, a bus and a projector wired together, with the operations an
//! agent runtime calls.

use std::sync::Arc;

use crate::bus::Bus;
use crate::error::{Error, Result};
use crate::event::SyncEvent;
use crate::group::{GroupCommitOptions, GroupCommitProjector};
use crate::id::{now_ms, SessionId};
use crate::local_bus::LocalBus;
use crate::memory::MemoryStore;
use crate::model::{Message, Part, Session};
use crate::processor::{Processor, ProcessorOptions};
use crate::projector::{ClaimPolicy, DirectProjector, Projector, Scope};
use crate::read::{filter_compacted, CompactedView};
use crate::recover::{recover, RecoverReport};
use crate::store::{Cursor, Page, Store};
use crate::tenant::TenantId;

/// Events the in-memory engine's bus retains per session for replay.
pub const DEFAULT_REPLAY_PER_SESSION: usize = 65_536;

/// A store, a bus and the projector between them.
#[derive(Clone, Debug)]
pub struct Engine {
    /// Where rows live.
    pub store: Arc<dyn Store>,
    /// Where live events go.
    pub bus: Arc<dyn Bus>,
    /// Commits then publishes.
    pub projector: Arc<dyn Projector>,
}

impl Engine {
    /// An engine with the default commit policy: a [`GroupCommitProjector`] with
    /// [`GroupCommitOptions::default`] (terminal boundaries committed before they are
    /// published, within a 10 ms group-commit window; see [`crate::group`]). The store
    /// then writes each block and tool once; [`Engine::direct`] commits every boundary.
    /// The window runs on tokio's timer: the runtime needs it enabled (`enable_time` or
    /// `enable_all` on a runtime builder; `#[tokio::main]` does).
    pub fn new(store: Arc<dyn Store>, bus: Arc<dyn Bus>) -> Self {
        Self::with_group_commit(store, bus, GroupCommitOptions::default())
    }

    /// An engine with the in-process [`DirectProjector`]: every boundary its own
    /// transaction, committed before it is published. About twice the commits of
    /// [`Engine::new`]'s policy, and the store holds every non-terminal boundary too
    /// (an opened block, a running tool) without relying on the bus after a crash.
    pub fn direct(store: Arc<dyn Store>, bus: Arc<dyn Bus>) -> Self {
        Self::direct_claiming(store, bus, ClaimPolicy::default())
    }

    /// [`Engine::direct`] whose projector claims the sessions it writes with `policy`
    /// (its writer's name, lease, and what to do when another writer holds a session).
    pub fn direct_claiming(store: Arc<dyn Store>, bus: Arc<dyn Bus>, policy: ClaimPolicy) -> Self {
        let projector = Arc::new(DirectProjector::with_claims(
            Arc::clone(&store),
            Arc::clone(&bus),
            policy,
        ));
        Self {
            store,
            bus,
            projector,
        }
    }

    /// An engine with a [`GroupCommitProjector`]: terminal boundaries committed before
    /// they are published, other writes riding along, sessions sharing transactions
    /// within `options.window` (see [`crate::group`]).
    pub fn with_group_commit(
        store: Arc<dyn Store>,
        bus: Arc<dyn Bus>,
        options: GroupCommitOptions,
    ) -> Self {
        Self::group_commit_claiming(store, bus, options, ClaimPolicy::default())
    }

    /// [`Engine::with_group_commit`] whose projector claims the sessions it writes with
    /// `policy`.
    pub fn group_commit_claiming(
        store: Arc<dyn Store>,
        bus: Arc<dyn Bus>,
        options: GroupCommitOptions,
        policy: ClaimPolicy,
    ) -> Self {
        let projector = Arc::new(GroupCommitProjector::with_claims(
            Arc::clone(&store),
            Arc::clone(&bus),
            options,
            policy,
        ));
        Self {
            store,
            bus,
            projector,
        }
    }

    /// An engine on a [`MemoryStore`] and a [`LocalBus`] with a replay buffer, with the
    /// default commit policy.
    pub fn in_memory() -> Self {
        Self::new(
            Arc::new(MemoryStore::new()),
            Arc::new(LocalBus::with_replay(DEFAULT_REPLAY_PER_SESSION)),
        )
    }

    /// The writer's handle on a session.
    pub async fn scope(&self, tenant: &TenantId, session: &SessionId) -> Result<Scope> {
        self.projector.scope(tenant, session).await
    }

    /// Creates (or overwrites) a session and returns its scope.
    pub async fn put_session(&self, tenant: &TenantId, session: Session) -> Result<Scope> {
        let scope = self.projector.scope(tenant, &session.id).await?;
        self.projector
            .commit(&scope, vec![SyncEvent::SessionUpdated { info: session }])
            .await?;
        Ok(scope)
    }

    /// Writes a message and its parts in one batch.
    pub async fn put_message(
        &self,
        scope: &Scope,
        message: Message,
        parts: Vec<Part>,
    ) -> Result<u64> {
        if let Some(p) = parts.iter().find(|p| p.message_id != message.id) {
            return Err(Error::invalid(format!(
                "part {} belongs to message {}, not {}",
                p.id, p.message_id, message.id
            )));
        }
        let mut events = Vec::with_capacity(parts.len() + 1);
        events.push(SyncEvent::MessageUpdated { info: message });
        events.extend(
            parts
                .into_iter()
                .map(|part| SyncEvent::PartUpdated { part }),
        );
        self.projector.commit(scope, events).await
    }

    /// Starts a processor for an open assistant message.
    pub async fn processor(
        &self,
        scope: Scope,
        message: Message,
        opts: ProcessorOptions,
    ) -> Result<Processor> {
        Processor::start(Arc::clone(&self.projector), scope, message, opts).await
    }

    /// Closes what a crash left open in `tenant` (or one session).
    pub async fn recover(
        &self,
        tenant: &TenantId,
        session: Option<&SessionId>,
    ) -> Result<RecoverReport> {
        recover(self.projector.as_ref(), tenant, session, now_ms()).await
    }

    /// The compacted view of a session.
    pub async fn view(&self, tenant: &TenantId, session: &SessionId) -> Result<CompactedView> {
        // A reverted session's view is over what the revert leaves visible.
        if let Some(mark) = self.revert_mark(tenant, session).await? {
            let all = crate::read::read_all(self.store.as_ref(), tenant, session, 1000).await?;
            let shown = crate::revert::visible(all, &mark);
            return Ok(crate::read::filter_compacted_reference(&shown));
        }
        filter_compacted(self.store.as_ref(), tenant, session).await
    }

    /// The session's revert mark ([`crate::revert`]), if it exists and has one.
    async fn revert_mark(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> Result<Option<crate::revert::Mark>> {
        Ok(self
            .store
            .session(tenant, session)
            .await?
            .and_then(|s| crate::revert::mark(&s.info)))
    }

    /// One page of history, newest page first.
    pub async fn history(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        before: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page> {
        let mut page = self.store.messages(tenant, session, before, limit).await?;
        // What a revert hides is left out of the pages (it is at the newest end, so
        // the first pages are the shorter ones).
        if let Some(mark) = self.revert_mark(tenant, session).await? {
            page.messages = crate::revert::visible(std::mem::take(&mut page.messages), &mark);
        }
        Ok(page)
    }
}
