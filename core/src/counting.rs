//! `CountingStore`: a wrapper that counts what reaches a store.
//!
//! Used by the CLI to report what a replay wrote, and by tests to prove the write
//! discipline (how often each part is written, that no batch is empty, …).

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;

use crate::error::Result;
use crate::event::{Envelope, SyncEvent};
use crate::forward::Forward;
use crate::id::{PartId, SessionId};
use crate::store::{Cursor, Page, Store};
use crate::tenant::TenantId;

/// Totals of what was applied through a [`CountingStore`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct WriteCounts {
    /// `apply` calls that succeeded (transactions).
    pub commits: u64,
    /// Events applied (rows written or removed).
    pub rows: u64,
    /// JSON bytes of the applied events: the bytes handed to the backend.
    pub bytes: u64,
    /// Page reads.
    pub page_reads: u64,
}

#[derive(Debug, Default)]
struct Inner {
    totals: WriteCounts,
    part_writes: HashMap<PartId, u32>,
}

/// Wraps a store and counts commits, rows, bytes, page reads and writes per part.
#[derive(Debug)]
pub struct CountingStore {
    inner: Arc<dyn Store>,
    counts: Mutex<Inner>,
}

impl CountingStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Self {
            inner,
            counts: Mutex::new(Inner::default()),
        }
    }

    /// Totals so far.
    pub fn totals(&self) -> WriteCounts {
        self.counts.lock().totals
    }

    /// How many times `part` was upserted.
    pub fn part_writes(&self, part: &PartId) -> u32 {
        self.counts
            .lock()
            .part_writes
            .get(part)
            .copied()
            .unwrap_or(0)
    }

    /// Upsert counts of every part written so far.
    pub fn all_part_writes(&self) -> HashMap<PartId, u32> {
        self.counts.lock().part_writes.clone()
    }

    /// Resets every counter.
    pub fn reset(&self) {
        *self.counts.lock() = Inner::default();
    }
}

#[async_trait]
impl Forward for CountingStore {
    fn inner(&self) -> &dyn Store {
        &*self.inner
    }

    async fn apply(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        self.inner.apply(batch).await?;
        let bytes: u64 = batch
            .iter()
            .map(|e| serde_json::to_vec(&e.event).map_or(0, |v| v.len() as u64))
            .sum();
        let mut c = self.counts.lock();
        c.totals.commits += 1;
        c.totals.rows += batch.len() as u64;
        c.totals.bytes += bytes;
        for e in batch {
            if let SyncEvent::PartUpdated { part } = &e.event {
                *c.part_writes.entry(part.id.clone()).or_insert(0) += 1;
            }
        }
        Ok(())
    }

    async fn messages(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        before: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page> {
        self.counts.lock().totals.page_reads += 1;
        self.inner.messages(tenant, session, before, limit).await
    }
}
