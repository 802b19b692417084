//! `Forward`: a [`Store`] that wraps another and changes only some of its methods.

use std::sync::Arc;

use async_trait::async_trait;

use crate::blob::{BlobEntry, BlobId, BlobSweep, BlobValue};
use crate::error::Result;
use crate::event::{Envelope, SyncEvent};
use crate::fence::{Claim, ClaimRequest};
use crate::id::{MessageId, SessionId};
use crate::model::MessageWithParts;
use crate::search::{SearchHit, SearchQuery};
use crate::store::{
    Capabilities, Cursor, Footprint, OpenItems, Page, Reclaimed, SessionPage, SessionState, Store,
    TenantStats,
};
use crate::tenant::TenantId;

/// A store that wraps another: every [`Store`] method forwards to [`inner`](Self::inner)
/// unless the wrapper overrides it. A type implementing `Forward` is a `Store` (a blanket
/// impl), so a wrapper that changes one method writes that one method and `inner`.
///
/// The methods have the names and signatures of [`Store`]'s, and an override keeps the
/// contract of the method it replaces (its `# Behavior` list). [`close`](Self::close)
/// forwards too, as the contract asks of wrappers.
///
/// Call a wrapper through [`Store`] (as `Arc<dyn Store>`, or `Store::apply(&w, …)`):
/// with both traits in scope, a method call on the concrete type is ambiguous.
///
/// # Example
///
/// A store that refuses every write and reads through to the one it wraps:
///
/// ```
/// use std::sync::Arc;
///
/// use async_trait::async_trait;
/// use forge_core::{Envelope, Error, Forward, MemoryStore, Result, Store, SyncEvent, TenantId};
///
/// #[derive(Debug)]
/// struct ReadOnly(Arc<dyn Store>);
///
/// #[async_trait]
/// impl Forward for ReadOnly {
///     fn inner(&self) -> &dyn Store {
///         &*self.0
///     }
///
///     async fn apply(&self, _: &[Envelope<SyncEvent>]) -> Result<()> {
///         Err(Error::Unsupported("this store is read-only".into()))
///     }
/// }
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let store: Arc<dyn Store> = Arc::new(ReadOnly(Arc::new(MemoryStore::new())));
/// assert_eq!(store.capabilities().name, "memory");
/// assert!(store.sessions(&TenantId::default()).await?.is_empty());
/// assert!(store.apply(&[]).await.is_err());
/// # Ok::<_, Error>(())
/// # }).unwrap();
/// ```
#[async_trait]
pub trait Forward: std::fmt::Debug + Send + Sync + 'static {
    /// The store calls are forwarded to.
    fn inner(&self) -> &dyn Store;

    /// [`Store::capabilities`]; forwards by default.
    fn capabilities(&self) -> Capabilities {
        self.inner().capabilities()
    }

    /// [`Store::apply`]; forwards by default.
    async fn apply(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        self.inner().apply(batch).await
    }

    /// [`Store::claim`]; forwards by default.
    async fn claim(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        request: &ClaimRequest,
    ) -> Result<Claim> {
        self.inner().claim(tenant, session, request).await
    }

    /// [`Store::release`]; forwards by default.
    async fn release(&self, tenant: &TenantId, session: &SessionId, epoch: u64) -> Result<()> {
        self.inner().release(tenant, session, epoch).await
    }

    /// [`Store::claimed`]; forwards by default.
    async fn claimed(&self, tenant: &TenantId, session: &SessionId) -> Result<Option<Claim>> {
        self.inner().claimed(tenant, session).await
    }

    /// [`Store::session`]; forwards by default.
    async fn session(&self, tenant: &TenantId, id: &SessionId) -> Result<Option<SessionState>> {
        self.inner().session(tenant, id).await
    }

    /// [`Store::sessions`]; forwards by default.
    async fn sessions(&self, tenant: &TenantId) -> Result<Vec<SessionState>> {
        self.inner().sessions(tenant).await
    }

    /// [`Store::sessions_after`]; forwards by default.
    async fn sessions_after(
        &self,
        tenant: &TenantId,
        after: Option<&SessionId>,
        limit: usize,
    ) -> Result<SessionPage> {
        self.inner().sessions_after(tenant, after, limit).await
    }

    /// [`Store::stats`]; forwards by default.
    async fn stats(&self, tenant: &TenantId) -> Result<TenantStats> {
        self.inner().stats(tenant).await
    }

    /// [`Store::footprint`]; forwards by default.
    async fn footprint(&self) -> Result<Footprint> {
        self.inner().footprint().await
    }

    /// [`Store::reclaim`]; forwards by default.
    async fn reclaim(&self) -> Result<Reclaimed> {
        self.inner().reclaim().await
    }

    /// [`Store::message`]; forwards by default.
    async fn message(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &MessageId,
    ) -> Result<Option<MessageWithParts>> {
        self.inner().message(tenant, session, id).await
    }

    /// [`Store::messages`]; forwards by default.
    async fn messages(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        before: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page> {
        self.inner().messages(tenant, session, before, limit).await
    }

    /// [`Store::open_items`]; forwards by default.
    async fn open_items(
        &self,
        tenant: &TenantId,
        session: Option<&SessionId>,
    ) -> Result<OpenItems> {
        self.inner().open_items(tenant, session).await
    }

    /// [`Store::put_blobs`]; forwards by default.
    async fn put_blobs(
        &self,
        tenant: &TenantId,
        blobs: &[BlobValue],
        now_ms: i64,
        refresh_before_ms: i64,
    ) -> Result<u64> {
        self.inner()
            .put_blobs(tenant, blobs, now_ms, refresh_before_ms)
            .await
    }

    /// [`Store::blobs`]; forwards by default.
    async fn blobs(&self, tenant: &TenantId, ids: &[BlobId]) -> Result<Vec<Option<Arc<str>>>> {
        self.inner().blobs(tenant, ids).await
    }

    /// [`Store::blob_list`]; forwards by default.
    async fn blob_list(&self, tenant: &TenantId) -> Result<Vec<BlobEntry>> {
        self.inner().blob_list(tenant).await
    }

    /// [`Store::delete_blobs`]; forwards by default.
    async fn delete_blobs(
        &self,
        tenant: &TenantId,
        ids: &[BlobId],
        touched_before_ms: i64,
    ) -> Result<u64> {
        self.inner()
            .delete_blobs(tenant, ids, touched_before_ms)
            .await
    }

    /// [`Store::sweep_blobs`]; forwards by default.
    async fn sweep_blobs(&self, tenant: &TenantId) -> Result<BlobSweep> {
        self.inner().sweep_blobs(tenant).await
    }

    /// [`Store::search`]; forwards by default.
    async fn search(&self, tenant: &TenantId, query: &SearchQuery) -> Result<Vec<SearchHit>> {
        self.inner().search(tenant, query).await
    }

    /// [`Store::close`]; forwards by default.
    async fn close(&self) -> Result<()> {
        self.inner().close().await
    }
}

#[async_trait]
impl<T: Forward> Store for T {
    fn capabilities(&self) -> Capabilities {
        Forward::capabilities(self)
    }

    async fn apply(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        Forward::apply(self, batch).await
    }

    async fn claim(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        request: &ClaimRequest,
    ) -> Result<Claim> {
        Forward::claim(self, tenant, session, request).await
    }

    async fn release(&self, tenant: &TenantId, session: &SessionId, epoch: u64) -> Result<()> {
        Forward::release(self, tenant, session, epoch).await
    }

    async fn claimed(&self, tenant: &TenantId, session: &SessionId) -> Result<Option<Claim>> {
        Forward::claimed(self, tenant, session).await
    }

    async fn session(&self, tenant: &TenantId, id: &SessionId) -> Result<Option<SessionState>> {
        Forward::session(self, tenant, id).await
    }

    async fn sessions(&self, tenant: &TenantId) -> Result<Vec<SessionState>> {
        Forward::sessions(self, tenant).await
    }

    async fn sessions_after(
        &self,
        tenant: &TenantId,
        after: Option<&SessionId>,
        limit: usize,
    ) -> Result<SessionPage> {
        Forward::sessions_after(self, tenant, after, limit).await
    }

    async fn stats(&self, tenant: &TenantId) -> Result<TenantStats> {
        Forward::stats(self, tenant).await
    }

    async fn footprint(&self) -> Result<Footprint> {
        Forward::footprint(self).await
    }

    async fn reclaim(&self) -> Result<Reclaimed> {
        Forward::reclaim(self).await
    }

    async fn message(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &MessageId,
    ) -> Result<Option<MessageWithParts>> {
        Forward::message(self, tenant, session, id).await
    }

    async fn messages(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        before: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page> {
        Forward::messages(self, tenant, session, before, limit).await
    }

    async fn open_items(
        &self,
        tenant: &TenantId,
        session: Option<&SessionId>,
    ) -> Result<OpenItems> {
        Forward::open_items(self, tenant, session).await
    }

    async fn put_blobs(
        &self,
        tenant: &TenantId,
        blobs: &[BlobValue],
        now_ms: i64,
        refresh_before_ms: i64,
    ) -> Result<u64> {
        Forward::put_blobs(self, tenant, blobs, now_ms, refresh_before_ms).await
    }

    async fn blobs(&self, tenant: &TenantId, ids: &[BlobId]) -> Result<Vec<Option<Arc<str>>>> {
        Forward::blobs(self, tenant, ids).await
    }

    async fn blob_list(&self, tenant: &TenantId) -> Result<Vec<BlobEntry>> {
        Forward::blob_list(self, tenant).await
    }

    async fn delete_blobs(
        &self,
        tenant: &TenantId,
        ids: &[BlobId],
        touched_before_ms: i64,
    ) -> Result<u64> {
        Forward::delete_blobs(self, tenant, ids, touched_before_ms).await
    }

    async fn sweep_blobs(&self, tenant: &TenantId) -> Result<BlobSweep> {
        Forward::sweep_blobs(self, tenant).await
    }

    async fn search(&self, tenant: &TenantId, query: &SearchQuery) -> Result<Vec<SearchHit>> {
        Forward::search(self, tenant, query).await
    }

    async fn close(&self) -> Result<()> {
        Forward::close(self).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use super::*;
    use crate::{CountingStore, MemoryStore, RetryPolicy, RetryStore};

    /// A store that counts the calls to its `close`.
    #[derive(Debug, Default)]
    struct Closes {
        inner: MemoryStore,
        closed: AtomicU32,
    }

    #[async_trait]
    impl Forward for Closes {
        fn inner(&self) -> &dyn Store {
            &self.inner
        }

        async fn close(&self) -> Result<()> {
            self.closed.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    /// A wrapper that changes nothing.
    #[derive(Debug)]
    struct Plain(Arc<dyn Store>);

    #[async_trait]
    impl Forward for Plain {
        fn inner(&self) -> &dyn Store {
            &*self.0
        }
    }

    #[tokio::test]
    async fn every_wrapper_forwards_close_to_the_store_it_wraps() {
        let base = Arc::new(Closes::default());
        let wrapped: Vec<(&str, Arc<dyn Store>)> = vec![
            ("a Forward wrapper", Arc::new(Plain(base.clone()))),
            (
                "RetryStore",
                Arc::new(RetryStore::new(
                    base.clone(),
                    "server x",
                    RetryPolicy::default(),
                )),
            ),
            ("CountingStore", Arc::new(CountingStore::new(base.clone()))),
        ];
        for (n, (what, store)) in (1..).zip(wrapped) {
            store.close().await.unwrap();
            assert_eq!(
                base.closed.load(Ordering::SeqCst),
                n,
                "{what} did not forward close"
            );
        }
    }
}
