//! Shared set-up for the properties that drive a Processor: a session, a user message
//! and an open assistant message on the core's [`TurnDriver`], on a deterministic clock.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use forge_core::model::PartBody;
use forge_core::processor::assistant_message;
use forge_core::turn::{TurnDriver, TurnOptions};
use forge_core::{
    Bus, DirectProjector, MessageId, MessageWithParts, Part, ProcessorOptions, Projector,
    SessionId, Store, SyncEvent, TenantId,
};

use super::crash::RecoverFn;
use crate::harness::ctx_err;
use crate::strategies::model::{self, MessageKind, PartKind, T0};

/// A clock that advances 1 ms per call, so runs are reproducible.
pub(crate) fn ticking_clock() -> forge_core::processor::Clock {
    let t = Arc::new(AtomicI64::new(T0));
    Arc::new(move || t.fetch_add(1, Ordering::Relaxed))
}

/// A session with one user message and a driver with its assistant answer open.
pub(crate) struct Turn {
    pub tenant: TenantId,
    pub session: SessionId,
    pub assistant: MessageId,
    pub driver: TurnDriver,
}

impl Turn {
    pub async fn start(
        store: Arc<dyn Store>,
        bus: Arc<dyn Bus>,
        tenant: TenantId,
    ) -> Result<(Arc<dyn Projector>, Turn), String> {
        Self::start_with(store, bus, tenant, false).await
    }

    /// [`Turn::start`]; with `persist_every_delta` the processor rewrites an open block's
    /// part on every delta, so its stored text is the text streamed so far.
    pub async fn start_with(
        store: Arc<dyn Store>,
        bus: Arc<dyn Bus>,
        tenant: TenantId,
        persist_every_delta: bool,
    ) -> Result<(Arc<dyn Projector>, Turn), String> {
        let projector: Arc<dyn Projector> = Arc::new(DirectProjector::new(store, bus));
        let session = SessionId::from("ses_turn");
        let scope = projector
            .scope(&tenant, &session)
            .await
            .map_err(ctx_err("projector scope"))?;
        let user = MessageId::from("msg_0001_user");
        let user_text = model::part(&session, &user, &"prt_0001_user".into(), PartKind::Text, 0);
        projector
            .commit(
                &scope,
                vec![
                    SyncEvent::SessionUpdated {
                        info: model::session(&session, 0),
                    },
                    SyncEvent::MessageUpdated {
                        info: model::message(&session, &user, MessageKind::User, 0),
                    },
                    SyncEvent::PartUpdated { part: user_text },
                ],
            )
            .await
            .map_err(ctx_err("writing the session and the user message"))?;
        let options = TurnOptions {
            processor: ProcessorOptions {
                clock: ticking_clock(),
                text_hook: None,
                persist_every_delta,
            },
            ..TurnOptions::default()
        };
        let mut driver = TurnDriver::new(Arc::clone(&projector), scope, options);
        let mut answer = assistant_message(session.clone(), user, "provider", "model", T0);
        answer.id = MessageId::from("msg_0002_assistant");
        let assistant = driver
            .open_message(answer)
            .await
            .map_err(ctx_err("Processor::start"))?;
        Ok((
            projector,
            Turn {
                tenant,
                session,
                assistant,
                driver,
            },
        ))
    }

    /// The process running the turn dies: the turn and its `projector` go, and a new
    /// projector on `store` and `bus` runs `recover` over the turn's session (at `T0` +
    /// 1,000,000). `what` names the recover in its error.
    pub async fn crash(
        self,
        projector: Arc<dyn Projector>,
        store: &Arc<dyn Store>,
        bus: &Arc<dyn Bus>,
        recover: RecoverFn,
        what: &str,
    ) -> Result<(), String> {
        let (tenant, session) = (self.tenant.clone(), self.session.clone());
        drop(self);
        drop(projector);
        let restarted = DirectProjector::new(Arc::clone(store), Arc::clone(bus));
        recover(&restarted, &tenant, Some(&session), T0 + 1_000_000)
            .await
            .map_err(ctx_err(what))?;
        Ok(())
    }
}

/// The assistant message as stored, with its parts.
pub(crate) async fn stored_answer(
    store: &dyn Store,
    tenant: &TenantId,
    session: &SessionId,
    id: &MessageId,
) -> Result<MessageWithParts, String> {
    store
        .message(tenant, session, id)
        .await
        .map_err(ctx_err("message()"))?
        .ok_or_else(|| format!("the assistant message {id} is missing from the store"))
}

/// The text of a text or reasoning part.
pub(crate) fn text_of(p: &Part) -> Option<&str> {
    match &p.body {
        PartBody::Text(t) => Some(&t.text),
        PartBody::Reasoning(r) => Some(&r.text),
        _ => None,
    }
}
