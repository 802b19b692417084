//! Broken stores whose bug only shows at real scale or with real data: limits at a size
//! (listings, pages, texts, batches) and lossy encodings (NUL, Unicode normalization,
//! numbers through `f64`, ids compared without case). Each wraps `MemoryStore`.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use forge_core::store::clamp_limit;
use forge_core::{
    Cursor, Envelope, MemoryStore, MessageId, MessageWithParts, OpenItems, Page, Result, SessionId,
    SessionState, Store, SyncEvent, TenantId,
};
use forge_testkit::Forward;
use parking_lot::Mutex;
use serde_json::Value;
use unicode_normalization::UnicodeNormalization;

/// The bug a [`ScaleStore`] has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleBug {
    /// `sessions` returns at most 1,024 sessions (drops the 1,025th and later).
    SessionsCappedAt1024,
    /// `open_items` returns at most 1,000 messages and 1,000 parts.
    OpenItemsCappedAt1000,
    /// A page holds at most 100 messages, even when 1,000 (within the cap) are asked.
    PagesCappedAt100,
    /// Texts of text and reasoning parts are cut to 1 MiB.
    TruncatesTextsPast1MiB,
    /// A batch of more than 1,000 events is applied as chunks of 1,000, each its own
    /// transaction: a failure in a later chunk leaves the earlier ones.
    ChunksBatchesOf1000,
    /// Every string of every row loses its NUL characters (a C-string API).
    StripsNul,
    /// Every string of every row is NFC-normalized.
    NormalizesNfc,
    /// Token counts go through an `f64` (as in Lua or JavaScript).
    TokensThroughF64,
    /// Costs are written with 15 significant digits (`%.15g`).
    CostsWith15Digits,
    /// Session ids compare without case (a `NOCASE` collation): the first spelling
    /// written is kept and every case variant names it.
    SessionIdsIgnoreCase,
    /// `sessions` reads in pages of 1,000 keys and the query for the next page forgets
    /// the tenant (`WHERE (tenant, id) > (last)` alone): past the 1,000th, the listing
    /// runs on into the sessions of the tenants that sort after it.
    ContinuationLosesTheTenant,
}

/// `MemoryStore` with one [`ScaleBug`].
#[derive(Debug)]
pub struct ScaleStore {
    inner: MemoryStore,
    bug: ScaleBug,
    spelling: Mutex<HashMap<(TenantId, String), SessionId>>,
    /// Every tenant written, for [`ScaleBug::ContinuationLosesTheTenant`].
    tenants: Mutex<std::collections::BTreeSet<TenantId>>,
}

impl ScaleStore {
    pub fn new(bug: ScaleBug) -> Self {
        Self {
            inner: MemoryStore::new(),
            bug,
            spelling: Mutex::new(HashMap::new()),
            tenants: Mutex::new(std::collections::BTreeSet::new()),
        }
    }

    /// The session id this store keys `id` by.
    fn key(&self, tenant: &TenantId, id: &SessionId) -> SessionId {
        if self.bug != ScaleBug::SessionIdsIgnoreCase {
            return id.clone();
        }
        self.spelling
            .lock()
            .entry((tenant.clone(), id.as_str().to_lowercase()))
            .or_insert_with(|| id.clone())
            .clone()
    }

    fn rewrite(&self, e: &Envelope<SyncEvent>) -> Envelope<SyncEvent> {
        let mut e = e.clone();
        match self.bug {
            ScaleBug::SessionIdsIgnoreCase => {
                let s = self.key(&e.tenant, &e.session_id);
                e.session_id = s.clone();
                match &mut e.event {
                    SyncEvent::SessionUpdated { info } => info.id = s,
                    SyncEvent::SessionDeleted { session_id }
                    | SyncEvent::MessageRemoved { session_id, .. }
                    | SyncEvent::PartRemoved { session_id, .. } => *session_id = s,
                    SyncEvent::MessageUpdated { info } => info.session_id = s,
                    SyncEvent::PartUpdated { part } => part.session_id = s,
                }
                e
            }
            ScaleBug::TruncatesTextsPast1MiB => {
                if let SyncEvent::PartUpdated { part } = &mut e.event {
                    let text = match &mut part.body {
                        forge_core::model::PartBody::Text(t) => Some(&mut t.text),
                        forge_core::model::PartBody::Reasoning(r) => Some(&mut r.text),
                        _ => None,
                    };
                    if let Some(t) = text {
                        let mut cut = t.len().min(1 << 20);
                        while !t.is_char_boundary(cut) {
                            cut -= 1;
                        }
                        t.truncate(cut);
                    }
                }
                e
            }
            ScaleBug::StripsNul
            | ScaleBug::NormalizesNfc
            | ScaleBug::TokensThroughF64
            | ScaleBug::CostsWith15Digits => {
                let mut v = serde_json::to_value(&e.event).expect("events serialize");
                lossy(self.bug, &mut v, None);
                e.event = serde_json::from_value(v).expect("a lossy event still parses");
                e
            }
            _ => e,
        }
    }
}

/// What the lossy encoding of `bug` does to `v` (under key `key`).
fn lossy(bug: ScaleBug, v: &mut Value, key: Option<&str>) {
    match v {
        Value::String(s) => match bug {
            ScaleBug::StripsNul => s.retain(|c| c != '\0'),
            ScaleBug::NormalizesNfc => *s = s.nfc().collect(),
            _ => {}
        },
        Value::Number(n) => match (bug, key) {
            (ScaleBug::CostsWith15Digits, Some("cost")) => {
                if let Some(f) = n.as_f64() {
                    let g: f64 = format!("{f:.14e}").parse().unwrap_or(f);
                    if let Some(x) = serde_json::Number::from_f64(g) {
                        *n = x;
                    }
                }
            }
            (
                ScaleBug::TokensThroughF64,
                Some("input" | "output" | "reasoning" | "read" | "write"),
            ) => {
                if let Some(u) = n.as_u64() {
                    *n = ((u as f64) as u64).into();
                }
            }
            _ => {}
        },
        Value::Array(a) => a.iter_mut().for_each(|x| lossy(bug, x, None)),
        Value::Object(m) => {
            let entries: Vec<(String, Value)> = std::mem::take(m).into_iter().collect();
            for (k, mut x) in entries {
                lossy(bug, &mut x, Some(&k));
                let k = match bug {
                    ScaleBug::StripsNul => k.replace('\0', ""),
                    ScaleBug::NormalizesNfc => k.nfc().collect(),
                    _ => k,
                };
                m.insert(k, x);
            }
        }
        _ => {}
    }
}

/// Every method it does not change forwards to the store it wraps.
#[async_trait]
impl Forward for ScaleStore {
    fn inner(&self) -> &dyn Store {
        &self.inner
    }

    async fn apply(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        let batch: Vec<Envelope<SyncEvent>> = batch.iter().map(|e| self.rewrite(e)).collect();
        self.tenants
            .lock()
            .extend(batch.iter().map(|e| e.tenant.clone()));
        if self.bug == ScaleBug::ChunksBatchesOf1000 && batch.len() > 1000 {
            for chunk in batch.chunks(1000) {
                self.inner.apply(chunk).await?;
            }
            return Ok(());
        }
        self.inner.apply(&batch).await
    }

    async fn session(&self, tenant: &TenantId, id: &SessionId) -> Result<Option<SessionState>> {
        self.inner.session(tenant, &self.key(tenant, id)).await
    }

    async fn sessions(&self, tenant: &TenantId) -> Result<Vec<SessionState>> {
        let mut all = self.inner.sessions(tenant).await?;
        if self.bug == ScaleBug::SessionsCappedAt1024 {
            all.truncate(1024);
        }
        if self.bug == ScaleBug::ContinuationLosesTheTenant && all.len() > 1000 {
            // The second page's query matches every key after the 1,000th: the rest of
            // this tenant, then every tenant after it.
            let later: Vec<TenantId> = self
                .tenants
                .lock()
                .range::<TenantId, _>((
                    std::ops::Bound::Excluded(tenant),
                    std::ops::Bound::Unbounded,
                ))
                .cloned()
                .collect();
            for t in later {
                all.extend(self.inner.sessions(&t).await?);
            }
        }
        Ok(all)
    }

    async fn message(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &MessageId,
    ) -> Result<Option<MessageWithParts>> {
        self.inner
            .message(tenant, &self.key(tenant, session), id)
            .await
    }

    async fn messages(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        before: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page> {
        let limit = match self.bug {
            ScaleBug::PagesCappedAt100 => clamp_limit(limit).min(100),
            _ => limit,
        };
        self.inner
            .messages(tenant, &self.key(tenant, session), before, limit)
            .await
    }

    async fn open_items(
        &self,
        tenant: &TenantId,
        session: Option<&SessionId>,
    ) -> Result<OpenItems> {
        let session = session.map(|s| self.key(tenant, s));
        let mut open = self.inner.open_items(tenant, session.as_ref()).await?;
        if self.bug == ScaleBug::OpenItemsCappedAt1000 {
            open.messages.truncate(1000);
            open.parts.truncate(1000);
        }
        Ok(open)
    }
}

/// A store over `bug`, for the factory.
pub fn store(bug: ScaleBug) -> Arc<dyn Store> {
    Arc::new(ScaleStore::new(bug))
}
