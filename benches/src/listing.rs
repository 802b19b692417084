//! Listing a large tenant: the first page of `Store::sessions_after` (and a page from
//! the middle) in a tenant of many sessions, timed per call.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use forge_store::{Envelope, Session, SessionId, Store, SyncEvent, TenantId};
use serde::{Deserialize, Serialize};

/// Sessions written per batch while the tenant is filled.
const FILL_BATCH: usize = 1000;

/// A backend's listing times.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Listing {
    /// The backend.
    pub backend: String,
    /// Sessions in the tenant.
    pub sessions: u64,
    /// Sessions per page.
    pub page: usize,
    /// Calls timed per kind of page.
    pub samples: usize,
    /// The first page: median and 99th percentile, ms.
    pub first_p50_ms: f64,
    /// The first page's 99th percentile, ms.
    pub first_p99_ms: f64,
    /// A page after an id in the middle: median, ms.
    pub middle_p50_ms: f64,
    /// Its 99th percentile, ms.
    pub middle_p99_ms: f64,
    /// How long filling the tenant took, s.
    pub fill_s: f64,
}

/// The `q` quantile of `ms` (sorted in place).
pub(crate) fn quantile(ms: &mut [f64], q: f64) -> f64 {
    ms.sort_by(f64::total_cmp);
    if ms.is_empty() {
        return 0.0;
    }
    let i = ((ms.len() - 1) as f64 * q).round() as usize;
    ms[i.min(ms.len() - 1)]
}

/// Fills a fresh tenant of `store` with `sessions` sessions, then times `samples` calls
/// of each page kind.
///
/// # Errors
/// The store's error.
pub async fn run(
    store: Arc<dyn Store>,
    sessions: u64,
    page: usize,
    samples: usize,
) -> Result<Listing> {
    let tenant = TenantId::new("listing")?;
    let t = Instant::now();
    let mut batch = Vec::with_capacity(FILL_BATCH);
    let mut middle = None;
    for i in 0..sessions {
        let id = SessionId::from(format!("ses_{i:010}"));
        if i == sessions / 2 {
            middle = Some(id.clone());
        }
        let mut info = Session::new(format!("session {i}"), 1_700_000_000_000);
        info.id = id.clone();
        batch.push(Envelope {
            tenant: tenant.clone(),
            session_id: id,
            seq: 1,
            epoch: None,
            event: SyncEvent::SessionUpdated { info },
        });
        if batch.len() == FILL_BATCH {
            store.apply(&batch).await?;
            batch.clear();
        }
    }
    if !batch.is_empty() {
        store.apply(&batch).await?;
    }
    let fill_s = t.elapsed().as_secs_f64();
    let time = |after: Option<SessionId>| {
        let store = Arc::clone(&store);
        let tenant = tenant.clone();
        async move {
            let mut ms = Vec::with_capacity(samples);
            for _ in 0..samples {
                let t = Instant::now();
                let got = store.sessions_after(&tenant, after.as_ref(), page).await?;
                ms.push(t.elapsed().as_secs_f64() * 1000.0);
                anyhow::ensure!(!got.sessions.is_empty(), "an empty page of a full tenant");
            }
            Ok::<_, anyhow::Error>(ms)
        }
    };
    let mut first = time(None).await?;
    let mut mid = time(middle).await?;
    Ok(Listing {
        backend: store.capabilities().name.to_owned(),
        sessions,
        page,
        samples,
        first_p50_ms: quantile(&mut first, 0.5),
        first_p99_ms: quantile(&mut first, 0.99),
        middle_p50_ms: quantile(&mut mid, 0.5),
        middle_p99_ms: quantile(&mut mid, 0.99),
        fill_s,
    })
}
