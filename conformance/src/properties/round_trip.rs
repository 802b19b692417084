//! Round-trip (contract property 9, docs/conformance.md): every message and part kind,
//! with every optional field, unknown roles, unknown part kinds and unknown fields at
//! every level, survives write → read unchanged through `session`, `sessions`, `message` and `messages`; `open_items` lists
//! exactly the open ones; and a read-modify-write (writing back what was read) changes
//! nothing. Every string ranges over all of Unicode and every number over its whole
//! range (see [`crate::strategies::model::arb_text`]); large cases add a message whose
//! text part and tool output hold megabytes.

use forge_core::model::{PartBody, ToolState};
use forge_core::{MessageId, MessageWithParts, PartId, Session, SessionId, Store, SyncEvent};
use proptest::collection::vec;
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

use crate::harness::{apply_both, ctx_err, envs, same, same_read, CaseRun, Ctx};
use crate::reference::{sorted, ReferenceStore};
use crate::strategies::model::{self, arb_message, arb_part, arb_session, MessageKind, PartKind};
use crate::strategies::scaled::{big_text, BigText, Sizes};
use crate::Property;

/// A case: one session and its messages with parts (ids ascending).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Case {
    /// The session.
    pub session: Session,
    /// Messages oldest first, parts in id order.
    pub messages: Vec<MessageWithParts>,
    /// A last message with a text part of this text and a tool whose output is half
    /// of it (large cases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub big: Option<BigText>,
}

impl Case {
    /// The case with its big message built.
    fn built(&self) -> Case {
        let mut out = Case {
            session: self.session.clone(),
            messages: self.messages.clone(),
            big: None,
        };
        let Some(big) = self.big else {
            return out;
        };
        let sid = self.session.id.clone();
        let m = MessageId::from("msg_zzz_big");
        let text = big.text();
        let mut part = model::part(&sid, &m, &PartId::from("prt_zzz_big_0"), PartKind::Text, 1);
        if let PartBody::Text(t) = &mut part.body {
            t.text.clone_from(&text);
        }
        let mut tool = model::part(
            &sid,
            &m,
            &PartId::from("prt_zzz_big_1"),
            PartKind::ToolCompleted,
            1,
        );
        if let PartBody::Tool(t) = &mut tool.body {
            if let ToolState::Completed(c) = &mut t.state {
                let mut half = text.len() / 2;
                while !text.is_char_boundary(half) {
                    half -= 1;
                }
                text[half..].clone_into(&mut c.output);
            }
        }
        out.messages.push(MessageWithParts {
            info: model::message(&sid, &m, MessageKind::Assistant, 1),
            parts: vec![part, tool],
        });
        out
    }
}

/// Any case: up to 5 messages of up to 5 parts, every kind.
pub fn case() -> impl Strategy<Value = Case> {
    let sid = SessionId::from("ses_round_trip");
    let placeholder = MessageId::from("msg_x");
    let message = (
        arb_message(sid.clone(), placeholder.clone()),
        vec(
            arb_part(sid.clone(), placeholder, PartId::from("prt_x")),
            0..5,
        ),
    );
    (arb_session(sid), vec(message, 1..5)).prop_map(|(session, messages)| Case {
        big: None,
        session,
        messages: messages
            .into_iter()
            .enumerate()
            .map(|(i, (mut info, mut parts))| {
                info.id = MessageId::from(format!("msg_{i:03}"));
                for (j, p) in parts.iter_mut().enumerate() {
                    p.id = PartId::from(format!("prt_{i:03}_{j}"));
                    p.message_id = info.id.clone();
                }
                MessageWithParts { info, parts }
            })
            .collect(),
    })
}

/// Large cases: a case with a big message of megabytes.
pub fn large_case(sizes: Sizes) -> impl Strategy<Value = Case> {
    (case(), big_text(sizes)).prop_map(|(mut c, big)| {
        c.big = Some(big);
        c
    })
}

pub(crate) fn run(ctx: &Ctx<'_>) -> CaseRun {
    let sizes = Sizes::new(ctx.config.scale);
    crate::harness::run_scaled(ctx, Property::RoundTrip, case(), large_case(sizes), |c| {
        check(ctx, c)
    })
}

fn writes(case: &Case) -> Vec<SyncEvent> {
    let mut events = vec![SyncEvent::SessionUpdated {
        info: case.session.clone(),
    }];
    for m in &case.messages {
        events.push(SyncEvent::MessageUpdated {
            info: m.info.clone(),
        });
        events.extend(
            m.parts
                .iter()
                .map(|p| SyncEvent::PartUpdated { part: p.clone() }),
        );
    }
    events
}

async fn read_back(
    store: &dyn Store,
    tenant: &forge_core::TenantId,
    case: &Case,
    model: &ReferenceStore,
    when: &str,
) -> Result<(), String> {
    let sid = &case.session.id;
    let what = format!("{when}: session()");
    let want = model.session(tenant, sid);
    same_read(&what, &want, "session()", store.session(tenant, sid)).await?;
    let what = format!("{when}: sessions()");
    let want = model.sessions(tenant);
    same_read(&what, &want, "sessions()", store.sessions(tenant)).await?;
    for m in &case.messages {
        let what = format!("{when}: message({}) of role {}", m.info.id, m.info.role());
        let read = store.message(tenant, sid, &m.info.id);
        same_read(&what, &Some(m.clone()), "message()", read).await?;
    }
    let what = format!("{when}: messages()");
    let read = async { Ok(store.messages(tenant, sid, None, 1000).await?.messages) };
    same_read(&what, &case.messages, "messages()", read).await?;
    let open = sorted(
        store
            .open_items(tenant, Some(sid))
            .await
            .map_err(ctx_err("open_items()"))?,
    );
    let want = sorted(model.open_items(tenant, Some(sid)));
    same(
        &format!("{when}: open_items().messages"),
        &want.messages,
        &open.messages,
    )?;
    same(
        &format!("{when}: open_items().parts"),
        &want.parts,
        &open.parts,
    )
}

pub(crate) fn check(ctx: &Ctx<'_>, case: &Case) -> Result<(), String> {
    let case = &case.built();
    ctx.block(async {
        let b = ctx.backend().await?;
        let tenant = b.tenant();
        let store = b.store.as_ref();
        let batch = envs(&tenant, 1, writes(case));
        let mut model = ReferenceStore::new();
        let invalid = "the generated case is invalid";
        apply_both(&mut model, store, &batch, invalid, "writing the case").await?;
        read_back(store, &tenant, case, &model, "write → read").await?;
        // Read-modify-write: write back exactly what was read.
        let state = store
            .session(&tenant, &case.session.id)
            .await
            .map_err(ctx_err("session()"))?
            .ok_or("the session vanished")?;
        let page = store
            .messages(&tenant, &case.session.id, None, 1000)
            .await
            .map_err(ctx_err("messages()"))?;
        let reread = Case {
            session: state.info,
            messages: page.messages,
            big: None,
        };
        let n = batch.len() as u64;
        let again = envs(&tenant, n + 1, writes(&reread));
        let rejected = "the model rejects the rewrite";
        apply_both(
            &mut model,
            store,
            &again,
            rejected,
            "writing back what was read",
        )
        .await?;
        read_back(store, &tenant, case, &model, "read-modify-write").await?;
        b.cleanup().await;
        Ok(())
    })
}
