//! Revert and restore (contract property 14, docs/conformance.md), with opencode's
//! semantics ([`forge_core::revert`]).
//!
//! A case is a session of 2–8 messages (alternating user and assistant, 1–3 parts each)
//! and a revert point: a message, and maybe one of its parts. Driven through an
//! [`Engine`] over the backend (the reads the facade and `serve` use) and a
//! [`TurnDriver`] for the new message:
//!
//! 1. **revert**: the mark is stored on the session row; the history pages and the
//!    compacted view show exactly what precedes the point (the point's message with its
//!    parts before the point's part, when a part is named); every row is still stored;
//! 2. **restore**: the mark is cleared; everything shows again, unchanged;
//! 3. **revert again**, then **a new user message**: what the mark hid is removed from
//!    the store, the mark is cleared, and the history is what was visible plus the new
//!    message.
//!
//! A backend that loses the session row's unknown fields loses the mark and is caught
//! at step 1.

use std::sync::Arc;

use forge_core::model::PartBody;
use forge_core::revert::{self, Mark};
use forge_core::turn::{TurnDriver, TurnOptions};
use forge_core::{
    read_all, Bus, Engine, Envelope, LocalBus, MessageId, MessageWithParts, PartId, SessionId,
    Store, SyncEvent, TenantId,
};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

use crate::harness::{ctx_err, CaseRun, Ctx};
use crate::strategies::model::{self, MessageKind, PartKind};
use crate::Property;

/// A case.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    /// Parts of each message (1–3), one entry per message (2–8).
    pub parts: Vec<u8>,
    /// The message the mark names (modulo the count).
    pub at: u8,
    /// The part it names, if any (modulo that message's parts).
    pub part: Option<u8>,
}

/// Any case.
pub fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(1u8..=3, 2..=8),
        any::<u8>(),
        prop::option::of(any::<u8>()),
    )
        .prop_map(|(parts, at, part)| Case { parts, at, part })
}

pub(crate) fn run(ctx: &Ctx<'_>) -> CaseRun {
    crate::harness::run_cases(ctx, Property::Revert, case(), |c| check(ctx, c))
}

fn history(session: &SessionId, case: &Case) -> Vec<MessageWithParts> {
    case.parts
        .iter()
        .enumerate()
        .map(|(j, n)| {
            let j8 = u8::try_from(j).unwrap_or(0);
            let id = MessageId::from(format!("msg_0000{j:02}"));
            let kind = if j % 2 == 0 {
                MessageKind::User
            } else {
                MessageKind::Assistant
            };
            let mut info = model::message(session, &id, kind, j8);
            if let Some(a) = info.as_assistant_mut() {
                a.parent_id = MessageId::from(format!("msg_0000{:02}", j - 1));
            }
            let parts = (0..*n)
                .map(|k| {
                    model::part(
                        session,
                        &id,
                        &PartId::from(format!("prt_{j:02}_{k}")),
                        PartKind::Text,
                        k,
                    )
                })
                .collect();
            MessageWithParts { info, parts }
        })
        .collect()
}

/// What the mark leaves visible, computed apart from [`revert::visible`].
fn expected(all: &[MessageWithParts], at: usize, part: Option<usize>) -> Vec<MessageWithParts> {
    let mut out: Vec<MessageWithParts> = all[..at].to_vec();
    if let Some(k) = part {
        let mut m = all[at].clone();
        m.parts.truncate(k);
        out.push(m);
    }
    out
}

fn ids(h: &[MessageWithParts]) -> String {
    h.iter()
        .map(|m| format!("{}:{}", m.info.id, m.parts.len()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The history as the engine pages it (page size 2), and its view's messages.
async fn shown(
    engine: &Engine,
    tenant: &TenantId,
    s: &SessionId,
) -> Result<(Vec<MessageWithParts>, Vec<MessageWithParts>), String> {
    let mut pages = Vec::new();
    let mut before = None;
    loop {
        let page = engine
            .history(tenant, s, before.as_ref(), 2)
            .await
            .map_err(ctx_err("paging the history"))?;
        pages.splice(0..0, page.messages);
        match page.next {
            Some(c) => before = Some(c),
            None => break,
        }
    }
    let view = engine
        .view(tenant, s)
        .await
        .map_err(ctx_err("reading the view"))?;
    Ok((pages, view.messages))
}

async fn set_mark(
    store: &dyn Store,
    tenant: &TenantId,
    s: &SessionId,
    mark: Option<&Mark>,
    seq: u64,
) -> Result<(), String> {
    let mut info = store
        .session(tenant, s)
        .await
        .map_err(ctx_err("reading the session"))?
        .ok_or("the session is missing")?
        .info;
    revert::set(&mut info, mark);
    store
        .apply(&[Envelope::new(
            tenant.clone(),
            s.clone(),
            seq,
            SyncEvent::SessionUpdated { info },
        )])
        .await
        .map_err(ctx_err("writing the mark"))
}

pub(crate) fn check(ctx: &Ctx<'_>, case: &Case) -> Result<(), String> {
    ctx.block(async {
        let b = ctx.backend().await?;
        let tenant = b.tenant();
        let store: Arc<dyn Store> = Arc::clone(&b.store);
        let bus: Arc<dyn Bus> = b.bus.clone().unwrap_or_else(|| Arc::new(LocalBus::new()));
        let engine = Engine::direct(Arc::clone(&store), Arc::clone(&bus));
        let s = SessionId::from("ses_rev");
        let all = history(&s, case);
        let mut batch = vec![SyncEvent::SessionUpdated {
            info: model::session(&s, 0),
        }];
        for m in &all {
            batch.push(SyncEvent::MessageUpdated {
                info: m.info.clone(),
            });
            batch.extend(
                m.parts
                    .iter()
                    .cloned()
                    .map(|part| SyncEvent::PartUpdated { part }),
            );
        }
        let envs: Vec<_> = batch
            .into_iter()
            .enumerate()
            .map(|(i, e)| Envelope::new(tenant.clone(), s.clone(), i as u64 + 1, e))
            .collect();
        store
            .apply(&envs)
            .await
            .map_err(ctx_err("writing the history"))?;
        let mut seq = envs.len() as u64;

        let at = usize::from(case.at) % all.len();
        let part = case.part.map(|k| usize::from(k) % all[at].parts.len());
        let mark = Mark {
            message: all[at].info.id.clone(),
            part: part.map(|k| all[at].parts[k].id.clone()),
        };
        let visible = expected(&all, at, part);

        // 1. Revert.
        seq += 1;
        set_mark(store.as_ref(), &tenant, &s, Some(&mark), seq).await?;
        let (pages, view) = shown(&engine, &tenant, &s).await?;
        if pages != visible || view != visible {
            return Err(format!(
                "reverted to {:?}: the history shows [{}] and the view [{}]; what precedes the \
                 point is [{}] (was the mark stored with the session?)",
                mark,
                ids(&pages),
                ids(&view),
                ids(&visible)
            ));
        }
        let stored = read_all(store.as_ref(), &tenant, &s, 1000)
            .await
            .map_err(ctx_err("reading"))?;
        if stored != all {
            return Err("a revert removed or changed stored rows before it was committed".into());
        }

        // 2. Restore.
        seq += 1;
        set_mark(store.as_ref(), &tenant, &s, None, seq).await?;
        let (pages, view) = shown(&engine, &tenant, &s).await?;
        if pages != all || view != all {
            return Err(format!(
                "restored: the history shows [{}] and the view [{}], not the whole [{}]",
                ids(&pages),
                ids(&view),
                ids(&all)
            ));
        }

        // 3. Revert again, then a new message.
        seq += 1;
        set_mark(store.as_ref(), &tenant, &s, Some(&mark), seq).await?;
        let scope = engine
            .scope(&tenant, &s)
            .await
            .map_err(ctx_err("claiming the session"))?;
        let mut driver =
            TurnDriver::new(Arc::clone(&engine.projector), scope, TurnOptions::default());
        let new_id = driver
            .write_user(
                vec![
                    model::part(
                        &s,
                        &MessageId::from("x"),
                        &PartId::from("x"),
                        PartKind::Text,
                        9,
                    )
                    .body,
                ],
                None,
                None,
                None,
            )
            .await
            .map_err(ctx_err("writing a new message"))?;
        let row = store
            .session(&tenant, &s)
            .await
            .map_err(ctx_err("reading the session"))?
            .ok_or("the session is gone")?;
        if revert::mark(&row.info).is_some() {
            return Err("after a new message the revert mark is still set".into());
        }
        let stored = read_all(store.as_ref(), &tenant, &s, 1000)
            .await
            .map_err(ctx_err("reading"))?;
        let (last, kept) = stored.split_last().ok_or("the session is empty")?;
        if last.info.id != new_id || kept != visible.as_slice() {
            return Err(format!(
                "after a new message the store holds [{}]; expected what the revert left \
                 visible [{}] and then the new message {new_id}",
                ids(&stored),
                ids(&visible)
            ));
        }
        if !matches!(last.parts.first().map(|p| &p.body), Some(PartBody::Text(_))) {
            return Err("the new message lost its part".into());
        }
        Ok(())
    })
}
