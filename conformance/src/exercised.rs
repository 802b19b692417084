//! What a property exercised: cases run and the largest sizes it reached, collected by
//! a store wrapper every case's backend goes through (and, for histories, by the
//! properties that page through them).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use forge_core::model::{PartBody, ToolState};
use forge_core::{
    Cursor, Envelope, Forward, OpenItems, Page, Part, Result, SessionId, SessionState, Store,
    SyncEvent, TenantId,
};

/// What one property exercised, for the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Exercised {
    /// Generated cases run (not counting shrinking), large ones included.
    pub cases: u32,
    /// Of those, large cases.
    pub large_cases: u32,
    /// The most events one `apply` call carried.
    pub largest_batch: u64,
    /// The longest text written: bytes of the longest text, reasoning, tool raw input /
    /// title / output / error, file URL or subtask prompt of any part applied.
    pub longest_text: u64,
    /// The most entries one listing call returned: `sessions`, `open_items` (messages
    /// and parts) or a page of `messages`.
    pub longest_listing: u64,
    /// The most messages of one session read back by paging through its history.
    pub longest_history: u64,
}

impl Exercised {
    /// Whether nothing was recorded (a skipped property).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / f64::from(1u32 << 20)),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

impl fmt::Display for Exercised {
    /// `batch 2731 rows, text 3.6 MiB, listing 2318, history 2731` (what was reached).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "batch {} rows, text {}, listing {}, history {}",
            self.largest_batch,
            bytes(self.longest_text),
            self.longest_listing,
            self.longest_history
        )
    }
}

/// Collects [`Exercised`] while a property runs; shared by every case's backend.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    batch: AtomicU64,
    text: AtomicU64,
    listing: AtomicU64,
    history: AtomicU64,
}

impl Stats {
    pub fn batch(&self, n: usize) {
        self.batch.fetch_max(n as u64, Ordering::Relaxed);
    }
    pub fn text(&self, n: usize) {
        self.text.fetch_max(n as u64, Ordering::Relaxed);
    }
    pub fn listing(&self, n: usize) {
        self.listing.fetch_max(n as u64, Ordering::Relaxed);
    }
    /// A session's history of `n` messages was read back whole.
    pub fn history(&self, n: usize) {
        self.history.fetch_max(n as u64, Ordering::Relaxed);
    }

    pub fn snapshot(&self, cases: u32, large_cases: u32) -> Exercised {
        Exercised {
            cases,
            large_cases,
            largest_batch: self.batch.load(Ordering::Relaxed),
            longest_text: self.text.load(Ordering::Relaxed),
            longest_listing: self.listing.load(Ordering::Relaxed),
            longest_history: self.history.load(Ordering::Relaxed),
        }
    }
}

/// The longest text-like field of a part, in bytes.
pub(crate) fn longest_text(part: &Part) -> usize {
    match &part.body {
        PartBody::Text(t) => t.text.len(),
        PartBody::Reasoning(r) => r.text.len(),
        PartBody::Tool(t) => match &t.state {
            ToolState::Pending(p) => p.raw.len(),
            ToolState::Running(r) => r.title.as_ref().map_or(0, String::len),
            ToolState::Completed(c) => c.output.len(),
            ToolState::Error(e) => e.error.len(),
        },
        PartBody::File(f) => f.url.len(),
        PartBody::Subtask(s) => s.prompt.len(),
        _ => 0,
    }
}

/// A store that records sizes into [`Stats`] and otherwise passes every call through.
#[derive(Debug)]
pub(crate) struct Measured {
    pub inner: Arc<dyn Store>,
    pub stats: Arc<Stats>,
}

#[async_trait]
impl Forward for Measured {
    fn inner(&self) -> &dyn Store {
        &*self.inner
    }
    async fn apply(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        self.stats.batch(batch.len());
        for e in batch {
            if let SyncEvent::PartUpdated { part } = &e.event {
                self.stats.text(longest_text(part));
            }
        }
        self.inner.apply(batch).await
    }
    async fn sessions(&self, tenant: &TenantId) -> Result<Vec<SessionState>> {
        let out = self.inner.sessions(tenant).await?;
        self.stats.listing(out.len());
        Ok(out)
    }
    async fn messages(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        before: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page> {
        let page = self.inner.messages(tenant, session, before, limit).await?;
        self.stats.listing(page.messages.len());
        Ok(page)
    }
    async fn open_items(
        &self,
        tenant: &TenantId,
        session: Option<&SessionId>,
    ) -> Result<OpenItems> {
        let open = self.inner.open_items(tenant, session).await?;
        self.stats.listing(open.messages.len() + open.parts.len());
        Ok(open)
    }
}
