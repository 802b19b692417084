//! Whether an event fits a fresh answer, asked before the answer is opened.
//!
//! A stream event with no assistant message open opens one implicitly, and opening
//! one stores it. A lenient replay must store nothing for an event it then skips, so
//! it first feeds the event to a throwaway [`Machine`], the Processor's decisions
//! without their effects: it says whether the event fits, with the same rules as the
//! real Processor, and its effects are dropped. Nothing is written or published; the
//! one question the machine may ask (a call of an earlier message waiting for
//! approval) is answered by reading the store, as the Processor would.

use forge_core::id::now_ms;
use forge_core::processor::{assistant_message, waiting_call, Machine};
use forge_core::{MessageId, ProcessorOptions, SessionId, StreamEvent, TenantId};

use crate::error::{classify, Result};

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
    let message = assistant_message(
        session.clone(),
        MessageId::generate(),
        "probe",
        "probe",
        now_ms(),
    );
    let kind = event.kind();
    let refused = |e| classify(at.to_owned(), kind, e);
    let mut machine =
        Machine::new(session.clone(), message, ProcessorOptions::default()).map_err(refused)?;
    let waiting = match machine.lookup(event) {
        Some(call_id) => waiting_call(&*engine.store, tenant, session, call_id)
            .await
            .map_err(refused)?,
        None => None,
    };
    machine.handle(event.clone(), waiting).map_err(refused)?;
    Ok(())
}
