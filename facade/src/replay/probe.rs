//! Whether an event fits a fresh answer, asked before the answer is opened.
//!
//! A stream event with no assistant message open opens one implicitly, and opening
//! one stores it. A lenient replay must store nothing for an event it then skips, so
//! it first feeds the event to a throwaway [`Processor`] whose projector keeps
//! nothing: the Processor itself says whether the event fits, with the same rules as
//! the real one.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use forge_core::id::now_ms;
use forge_core::processor::assistant_message;
use forge_core::projector::{Projector, Scope};
use forge_core::{
    Bus, Event, MessageId, Processor, ProcessorOptions, SessionId, Store, StreamEvent, SyncEvent,
    TenantId,
};

use crate::error::{classify, Result};

/// A projector that stores and publishes nothing.
struct Discard {
    store: Arc<dyn Store>,
    bus: Arc<dyn Bus>,
}

impl fmt::Debug for Discard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Discard")
    }
}

#[async_trait]
impl Projector for Discard {
    async fn scope(&self, tenant: &TenantId, session: &SessionId) -> forge_core::Result<Scope> {
        Ok(Scope::new(tenant.clone(), session.clone(), 0))
    }

    async fn commit(&self, scope: &Scope, _events: Vec<SyncEvent>) -> forge_core::Result<u64> {
        Ok(scope.last_seq())
    }

    fn emit(&self, scope: &Scope, _event: Event) -> forge_core::Result<u64> {
        Ok(scope.last_seq())
    }

    fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    fn bus(&self) -> &Arc<dyn Bus> {
        &self.bus
    }
}

/// `Ok` if `event` fits as the first event of a new assistant message in `session`;
/// the Processor's refusal, as the input error at `at`, if not. Nothing is stored or
/// published.
pub(super) async fn fits_a_new_answer(
    engine: &forge_core::Engine,
    tenant: &TenantId,
    session: &SessionId,
    at: &str,
    event: &StreamEvent,
) -> Result<()> {
    let discard = Arc::new(Discard {
        store: Arc::clone(&engine.store),
        bus: Arc::clone(&engine.bus),
    });
    let scope = Scope::new(tenant.clone(), session.clone(), 0);
    let message = assistant_message(
        session.clone(),
        MessageId::generate(),
        "probe",
        "probe",
        now_ms(),
    );
    let kind = event.kind();
    let refused = |e| classify(at.to_owned(), kind, e);
    let mut p = Processor::start(discard, scope, message, ProcessorOptions::default())
        .await
        .map_err(refused)?;
    p.handle(event.clone()).await.map_err(refused)?;
    Ok(())
}
