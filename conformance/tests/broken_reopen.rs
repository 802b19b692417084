//! The `reopen` property proves it can fail: a backend that keeps part of what it was
//! told in memory instead of on its "disk" passes every other property — a live handle
//! answers everything right — and only `reopen` catches it. A backend that cannot
//! reopen is reported as skipped, never as passed.
//!
//! The disk is a `MemoryStore` the factory keeps across reopens (standing in for a
//! file); the store handed out is a handle on it, and a reopen is a new handle.

#[path = "broken/common.rs"]
mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::{assert_because, assert_regression_printed, catching_config, failed};
use forge_conformance::StoreMap;
use forge_conformance::{last_handle, BackendFactory, Config, FnFactory, Outcome, Property};
use forge_core::{
    Bus, Capabilities, Cursor, Envelope, Forward, LocalBus, MemoryStore, MessageId,
    MessageWithParts, OpenItems, Page, Result, SessionId, SessionState, Store, SyncEvent, TenantId,
};

/// What a handle keeps only in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Forgets {
    /// Nothing: everything goes to the disk (the control).
    Nothing,
    /// Session seqs: the disk records every event with seq 1; the handle remembers the
    /// real seqs.
    Seqs,
    /// Session updates: the disk gets every session with an empty title; the handle
    /// remembers the titles.
    SessionTitles,
    /// Removals of rows an earlier handle wrote: the disk is not told a removal of a
    /// session this handle never wrote (a delete path that finds rows through an index
    /// built by this process only); the handle's cache forgets them.
    OlderRemovals,
}

/// A handle on a disk, with a write-through cache that holds what the disk is not told.
///
/// Every batch goes to the disk (degraded as `forgets` says) and, when the disk accepts
/// it, to the cache as written. A session the cache knows is read from the cache, any
/// other from the disk: a live handle reads everything right, a new handle on the same
/// disk reads what the disk kept.
#[derive(Debug)]
struct Handle {
    disk: Arc<MemoryStore>,
    cache: Option<MemoryStore>,
    forgets: Forgets,
    /// Disk and cache apply in the same order.
    writer: tokio::sync::Mutex<()>,
    /// Opened on a disk an earlier handle wrote.
    reopened: bool,
}

impl Handle {
    fn new(disk: Arc<MemoryStore>, forgets: Forgets) -> Self {
        Self {
            disk,
            cache: (forgets != Forgets::Nothing).then(MemoryStore::new),
            forgets,
            writer: tokio::sync::Mutex::new(()),
            reopened: false,
        }
    }

    /// What the disk is told of `env`.
    fn degraded(&self, env: &Envelope<SyncEvent>) -> Envelope<SyncEvent> {
        let mut env = env.clone();
        match (self.forgets, &mut env.event) {
            (Forgets::Seqs, _) => env.seq = 1,
            (Forgets::SessionTitles, SyncEvent::SessionUpdated { info }) => info.title.clear(),
            _ => {}
        }
        env
    }

    /// The store holding `session`: the cache when it knows the session.
    async fn holder(&self, tenant: &TenantId, session: &SessionId) -> Result<&dyn Store> {
        if let Some(cache) = &self.cache {
            if cache.session(tenant, session).await?.is_some() {
                return Ok(cache);
            }
        }
        Ok(self.disk.as_ref())
    }
}

#[async_trait]
impl Store for Handle {
    fn capabilities(&self) -> Capabilities {
        let mut caps = self.disk.capabilities();
        caps.name = "disk-and-cache";
        // It forwards no blob calls: large values stay in its rows.
        caps.blobs = false;
        caps
    }

    async fn claim(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        request: &forge_core::ClaimRequest,
    ) -> Result<forge_core::Claim> {
        self.disk.claim(tenant, session, request).await
    }

    async fn release(&self, tenant: &TenantId, session: &SessionId, epoch: u64) -> Result<()> {
        self.disk.release(tenant, session, epoch).await
    }

    async fn claimed(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> Result<Option<forge_core::Claim>> {
        self.disk.claimed(tenant, session).await
    }

    async fn apply(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        let _order = self.writer.lock().await;
        let mut told: Vec<_> = batch.iter().map(|e| self.degraded(e)).collect();
        if let (Forgets::OlderRemovals, Some(cache), true) =
            (self.forgets, &self.cache, self.reopened)
        {
            let mut kept = Vec::with_capacity(told.len());
            for e in told {
                let removal = matches!(
                    e.event,
                    SyncEvent::SessionDeleted { .. }
                        | SyncEvent::MessageRemoved { .. }
                        | SyncEvent::PartRemoved { .. }
                );
                let older = removal
                    && cache.session(&e.tenant, &e.session_id).await?.is_none()
                    && self.disk.session(&e.tenant, &e.session_id).await?.is_some();
                if !older {
                    kept.push(e);
                }
            }
            told = kept;
        }
        self.disk.apply(&told).await?;
        if let Some(cache) = &self.cache {
            // A session the cache never saw (written by an earlier handle) is rejected
            // there: the cache then stays out of it. The disk checked the epochs.
            let unfenced: Vec<_> = batch.iter().map(|e| e.clone().with_epoch(None)).collect();
            let _ = cache.apply(&unfenced).await;
        }
        Ok(())
    }

    async fn session(&self, tenant: &TenantId, id: &SessionId) -> Result<Option<SessionState>> {
        self.holder(tenant, id).await?.session(tenant, id).await
    }

    async fn sessions(&self, tenant: &TenantId) -> Result<Vec<SessionState>> {
        let mut out = Vec::new();
        for s in self.disk.sessions(tenant).await? {
            let id = s.info.id.clone();
            out.extend(self.session(tenant, &id).await?.or(Some(s)));
        }
        Ok(out)
    }

    async fn message(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &MessageId,
    ) -> Result<Option<MessageWithParts>> {
        self.holder(tenant, session)
            .await?
            .message(tenant, session, id)
            .await
    }

    async fn messages(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        before: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page> {
        self.holder(tenant, session)
            .await?
            .messages(tenant, session, before, limit)
            .await
    }

    async fn open_items(
        &self,
        tenant: &TenantId,
        session: Option<&SessionId>,
    ) -> Result<OpenItems> {
        if let Some(s) = session {
            return self
                .holder(tenant, s)
                .await?
                .open_items(tenant, session)
                .await;
        }
        let mut all = OpenItems::default();
        for s in self.disk.sessions(tenant).await? {
            let id = s.info.id;
            let open = self
                .holder(tenant, &id)
                .await?
                .open_items(tenant, Some(&id))
                .await?;
            all.messages.extend(open.messages);
            all.parts.extend(open.parts);
        }
        Ok(all)
    }
}

/// Hands out handles on fresh disks, with an in-process bus; reopens a disk as a new
/// handle.
struct Disks {
    forgets: Forgets,
    open: StoreMap<Arc<MemoryStore>>,
}

impl Disks {
    fn new(forgets: Forgets) -> Self {
        Self {
            forgets,
            open: StoreMap::new(),
        }
    }

    fn handle(&self, disk: Arc<MemoryStore>, reopened: bool) -> Arc<dyn Store> {
        let mut handle = Handle::new(Arc::clone(&disk), self.forgets);
        handle.reopened = reopened;
        let store: Arc<dyn Store> = Arc::new(handle);
        self.open.insert(&store, disk);
        store
    }
}

#[async_trait]
impl BackendFactory for Disks {
    fn name(&self) -> &'static str {
        "disk-and-cache"
    }

    async fn store(&self) -> Result<Arc<dyn Store>> {
        Ok(self.handle(Arc::new(MemoryStore::new()), false))
    }

    async fn bus(&self) -> Result<Option<Arc<dyn Bus>>> {
        Ok(Some(Arc::new(LocalBus::with_replay(100_000))))
    }

    async fn reopen(&self, store: Arc<dyn Store>) -> Result<Option<Arc<dyn Store>>> {
        last_handle(&store)?;
        let disk = self
            .open
            .remove(&store)
            .ok_or_else(|| forge_core::Error::invalid("not a store of this factory"))?;
        drop(store);
        Ok(Some(self.handle(disk, true)))
    }

    async fn teardown(&self, store: Arc<dyn Store>) -> Result<()> {
        self.open.remove(&store);
        Ok(())
    }
}

fn config() -> Config {
    // As in broken.rs: half again the default cases at least, so a catch is not luck.
    catching_config(400, Duration::from_secs(10))
}

/// Runs the whole suite on a handle that forgets `forgets`: `reopen` must fail with a
/// message containing one of `because`, and no other property may fail.
fn only_reopen_catches(forgets: Forgets, because: &[&str]) {
    let report = forge_conformance::run(&Disks::new(forgets), &config());
    let failed = failed(&report);
    println!(
        "CAUGHT | {forgets:?} | meant: reopen | failed: {}",
        failed.join(", ")
    );
    let result = report.result(Property::Reopen).expect("reopen ran");
    let text = result.failure_text();
    println!("{text}\n");
    assert_eq!(failed, ["reopen"], "{report}");
    assert_because(&text, "reopen failed", because);
    assert_regression_printed(&text, Property::Reopen);
}

#[test]
fn reopen_alone_catches_seqs_kept_only_in_memory() {
    only_reopen_catches(Forgets::Seqs, &["seqs would be reused"]);
}

#[test]
fn reopen_alone_catches_session_updates_kept_only_in_memory() {
    // Seen by the history check, or (when the generated history has no session
    // update) by the crashed turn's session after reopen.
    only_reopen_catches(
        Forgets::SessionTitles,
        &["after reopen: session", "after reopen, the crashed turn"],
    );
}

#[test]
fn reopen_alone_catches_removals_of_rows_written_before_a_restart_lost() {
    // Only the batches after the first reopen remove rows an earlier handle wrote.
    only_reopen_catches(
        Forgets::OlderRemovals,
        &[
            "after reopen and more batches",
            "after a second reopen",
            "after reopen and a new commit",
        ],
    );
}

#[test]
fn a_backend_that_keeps_everything_passes_reopen() {
    let report =
        forge_conformance::run(&Disks::new(Forgets::Nothing), &config().with_only("reopen"));
    let result = report.result(Property::Reopen).expect("reopen ran");
    assert_eq!(result.outcome, Outcome::Passed, "{report}");
    assert!(result.cases > 0);
}

#[test]
fn a_backend_that_cannot_reopen_is_skipped_with_the_reason() {
    let memory = FnFactory::new("memory", || Ok(Arc::new(MemoryStore::new())));
    let report = forge_conformance::run(&memory, &config().with_only("reopen"));
    let result = report.result(Property::Reopen).expect("reopen ran");
    let Outcome::Skipped { reason } = &result.outcome else {
        panic!("reopen on a store that cannot reopen: {report}");
    };
    assert!(reason.contains("cannot reopen"), "{reason}");
    assert_eq!(result.cases, 0);
    let xml = forge_conformance::junit_xml(&report);
    assert!(xml.contains("<skipped"), "{xml}");
}

/// A memory store that claims `durable: true` (the memory backend's own mutant that the
/// mutation run left alive: nothing tied the flag to the factory).
#[derive(Debug)]
struct ClaimsDurable(MemoryStore);

impl Forward for ClaimsDurable {
    fn inner(&self) -> &dyn Store {
        &self.0
    }
    fn capabilities(&self) -> Capabilities {
        let mut caps = self.0.capabilities();
        caps.name = "claims-durable";
        caps.durable = true;
        caps
    }
}

#[test]
fn a_store_that_claims_durable_but_cannot_reopen_fails_reopen() {
    let factory = FnFactory::new("claims-durable", || {
        Ok(Arc::new(ClaimsDurable(MemoryStore::new())))
    });
    let report = forge_conformance::run(&factory, &config().with_only("reopen"));
    let result = report.result(Property::Reopen).expect("reopen ran");
    let Outcome::Failed { message, .. } = &result.outcome else {
        panic!("reopen on a durable store that cannot reopen: {report}");
    };
    assert!(message.contains("durable: true"), "{message}");
    assert!(message.contains("cannot reopen"), "{message}");
}
