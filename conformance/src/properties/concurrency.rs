//! Concurrency (contract property 8, docs/conformance.md): many tokio tasks write many
//! sessions (one each) and one shared session at once (new messages, and updates to
//! parts of one hot message), reading between writes. No call may fail ("database is locked" and the like), no update may
//! be lost, and the shared session's seq is the highest one applied. The shared
//! session's messages and parts get ids generated as the engine generates them
//! (`MessageId::generate`), by every writer at once on two worker threads, many in one
//! millisecond: the history must hold them in id order, each writer's in the order it
//! made them. A large case runs 12–16 writers of 64–96 rounds, past 1,000 messages.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use forge_core::{read_all, MessageId, PartId, SessionId, Store, SyncEvent, TenantId};
use parking_lot::Mutex;
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

use crate::harness::{ctx_err, env, CaseRun, Ctx};
use crate::strategies::model::{self, MessageKind, PartKind};
use crate::Property;

/// A case: how many writers and how many rounds each.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    /// Concurrent writer tasks.
    pub writers: u8,
    /// Rounds per writer; each round writes three batches.
    pub rounds: u8,
}

/// Any case: 2–8 writers, 1–12 rounds.
pub fn case() -> impl Strategy<Value = Case> {
    (2u8..=8, 1u8..=12).prop_map(|(writers, rounds)| Case { writers, rounds })
}

/// Large cases: 12–16 writers of 64–96 rounds (a shared history of 769–1,537
/// messages).
pub fn large_case() -> impl Strategy<Value = Case> {
    (12u8..=16, 64u8..=96).prop_map(|(writers, rounds)| Case { writers, rounds })
}

pub(crate) fn run(ctx: &Ctx<'_>) -> CaseRun {
    crate::harness::run_scaled(ctx, Property::Concurrency, case(), large_case(), |c| {
        check(ctx, c)
    })
}

const SHARED: &str = "ses_shared";
const HOT: &str = "msg_hot";
/// The part every writer moves between the two [`RACE`] messages of the shared session.
const RACED: &str = "prt_raced";
/// How long a writer waits for the others before its racing move.
const MOVE_RENDEZVOUS: std::time::Duration = std::time::Duration::from_millis(200);
/// The messages the raced part moves between.
const RACE: [&str; 2] = ["msg_race_0", "msg_race_1"];

fn own(i: u8) -> SessionId {
    SessionId::from(format!("ses_w{i}"))
}

async fn writer(
    store: Arc<dyn Store>,
    tenant: TenantId,
    i: u8,
    rounds: u8,
    shared_seq: Arc<AtomicU64>,
    made: Arc<Mutex<Vec<MessageId>>>,
    moves: Arc<tokio::sync::Barrier>,
) -> Result<(), String> {
    let mine = own(i);
    let shared = SessionId::from(SHARED);
    let put = |_: &SessionId, seq: u64, events: Vec<SyncEvent>| {
        let batch: Vec<_> = events.into_iter().map(|e| env(&tenant, seq, e)).collect();
        let store = Arc::clone(&store);
        async move { store.apply(&batch).await }
    };
    put(
        &mine,
        1,
        vec![SyncEvent::SessionUpdated {
            info: model::session(&mine, i),
        }],
    )
    .await
    .map_err(ctx_err(format!("writer {i}: creating its session")))?;
    for j in 0..rounds {
        let m = MessageId::from(format!("msg_{j:03}"));
        put(
            &mine,
            2 + u64::from(j),
            vec![
                SyncEvent::MessageUpdated {
                    info: model::message(&mine, &m, MessageKind::User, j),
                },
                SyncEvent::PartUpdated {
                    part: model::part(
                        &mine,
                        &m,
                        &PartId::from(format!("prt_{j:03}")),
                        PartKind::Text,
                        j,
                    ),
                },
            ],
        )
        .await
        .map_err(ctx_err(format!("writer {i} round {j}: its own session")))?;
        let m = MessageId::generate();
        made.lock().push(m.clone());
        let seq = shared_seq.fetch_add(1, Ordering::SeqCst) + 1;
        put(
            &shared,
            seq,
            vec![
                SyncEvent::MessageUpdated {
                    info: model::message(&shared, &m, MessageKind::Assistant, j),
                },
                SyncEvent::PartUpdated {
                    part: model::part(&shared, &m, &PartId::generate(), PartKind::ToolCompleted, j),
                },
            ],
        )
        .await
        .map_err(ctx_err(format!(
            "writer {i} round {j}: a new message in the shared session"
        )))?;
        let seq = shared_seq.fetch_add(1, Ordering::SeqCst) + 1;
        put(
            &shared,
            seq,
            vec![SyncEvent::PartUpdated {
                part: model::part(
                    &shared,
                    &HOT.into(),
                    &PartId::from(format!("prt_hot_{i}")),
                    PartKind::Reasoning,
                    j,
                ),
            }],
        )
        .await
        .map_err(ctx_err(format!(
            "writer {i} round {j}: its part of the hot message"
        )))?;
        // Every writer moves one part between two messages at once: batches of one
        // session racing to move the same row. The writers set off together (a writer
        // that failed is waited for only briefly; its error fails the case).
        let _ = tokio::time::timeout(MOVE_RENDEZVOUS, moves.wait()).await;
        let to = MessageId::from(RACE[usize::from((i + j) % 2)]);
        let seq = shared_seq.fetch_add(1, Ordering::SeqCst) + 1;
        put(
            &shared,
            seq,
            vec![SyncEvent::PartUpdated {
                part: model::part(&shared, &to, &PartId::from(RACED), PartKind::Text, j),
            }],
        )
        .await
        .map_err(ctx_err(format!(
            "writer {i} round {j}: moving the raced part to {to}"
        )))?;
        store
            .messages(&tenant, &shared, None, 10)
            .await
            .map_err(ctx_err(format!(
                "writer {i} round {j}: reading the shared session"
            )))?;
    }
    Ok(())
}

pub(crate) fn check(ctx: &Ctx<'_>, case: &Case) -> Result<(), String> {
    ctx.block(async {
        let b = ctx.backend().await?;
        let tenant = b.tenant();
        let shared = SessionId::from(SHARED);
        b.store
            .apply(&[
                env(
                    &tenant,
                    1,
                    SyncEvent::SessionUpdated {
                        info: model::session(&shared, 0),
                    },
                ),
                env(
                    &tenant,
                    2,
                    SyncEvent::MessageUpdated {
                        info: model::message(&shared, &HOT.into(), MessageKind::User, 0),
                    },
                ),
                env(
                    &tenant,
                    3,
                    SyncEvent::MessageUpdated {
                        info: model::message(&shared, &RACE[0].into(), MessageKind::User, 0),
                    },
                ),
                env(
                    &tenant,
                    4,
                    SyncEvent::MessageUpdated {
                        info: model::message(&shared, &RACE[1].into(), MessageKind::User, 0),
                    },
                ),
            ])
            .await
            .map_err(ctx_err("creating the shared session"))?;
        let shared_seq = Arc::new(AtomicU64::new(4));
        let moves = Arc::new(tokio::sync::Barrier::new(usize::from(case.writers)));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let made: Vec<Arc<Mutex<Vec<MessageId>>>> =
            (0..case.writers).map(|_| Arc::default()).collect();
        let tasks: Vec<_> = (0..case.writers)
            .map(|i| {
                let moves = Arc::clone(&moves);
                let (store, tenant, seq, errors, made) = (
                    Arc::clone(&b.store),
                    tenant.clone(),
                    Arc::clone(&shared_seq),
                    Arc::clone(&errors),
                    Arc::clone(&made[usize::from(i)]),
                );
                let rounds = case.rounds;
                tokio::spawn(async move {
                    if let Err(e) = writer(store, tenant, i, rounds, seq, made, moves).await {
                        errors.lock().push(e);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await
                .map_err(|e| format!("a writer task panicked: {e}"))?;
        }
        if let Some(e) = errors.lock().first() {
            return Err(format!("a concurrent writer got an error: {e}"));
        }
        let store = b.store.as_ref();
        for i in 0..case.writers {
            let all = read_all(store, &tenant, &own(i), 1000)
                .await
                .map_err(ctx_err("read_all"))?;
            let complete =
                all.len() == usize::from(case.rounds) && all.iter().all(|m| m.parts.len() == 1);
            if !complete {
                return Err(format!(
                    "session {} of writer {i}: {} messages ({} parts) after {} rounds: updates \
                     were lost",
                    own(i),
                    all.len(),
                    all.iter().map(|m| m.parts.len()).sum::<usize>(),
                    case.rounds
                ));
            }
        }
        let all = read_all(store, &tenant, &shared, 1000)
            .await
            .map_err(ctx_err("read_all(shared)"))?;
        ctx.stats.history(all.len());
        let want = usize::from(case.writers) * usize::from(case.rounds) + 1 + RACE.len();
        if all.len() != want {
            return Err(format!(
                "the shared session holds {} messages, {want} were written: updates were lost",
                all.len()
            ));
        }
        let mut generated: Vec<MessageId> = made.iter().flat_map(|m| m.lock().clone()).collect();
        generated.push(HOT.into());
        generated.extend(RACE.iter().map(|&m| MessageId::from(m)));
        generated.sort();
        let stored: Vec<MessageId> = all.iter().map(|m| m.info.id.clone()).collect();
        if stored != generated {
            return Err(format!(
                "the shared session's history is not the generated ids in id order: first \
                 difference at {:?}",
                stored.iter().zip(&generated).position(|(a, b)| a != b)
            ));
        }
        for (i, mine) in made.iter().enumerate() {
            let mine = mine.lock();
            if mine.windows(2).any(|w| w[0] >= w[1]) {
                return Err(format!("writer {i}'s generated ids do not ascend"));
            }
        }
        let raced: Vec<&MessageId> = all
            .iter()
            .flat_map(|m| {
                m.parts
                    .iter()
                    .filter(|p| p.id.as_str() == RACED)
                    .map(|p| &p.message_id)
            })
            .collect();
        if raced.len() != 1 {
            return Err(format!(
                "the part every writer moved between two messages at once is held by {} \
                 messages ({raced:?}): racing moves of one part must leave it in exactly one",
                raced.len()
            ));
        }
        let hot = store
            .message(&tenant, &shared, &HOT.into())
            .await
            .map_err(ctx_err("message(hot)"))?
            .ok_or("the hot message was lost")?;
        let last = case.rounds - 1;
        for i in 0..case.writers {
            let want = model::part(
                &shared,
                &HOT.into(),
                &PartId::from(format!("prt_hot_{i}")),
                PartKind::Reasoning,
                last,
            );
            if !hot.parts.contains(&want) {
                return Err(format!(
                    "writer {i}'s last update of its part of the hot message was lost: {:?}",
                    hot.parts
                        .iter()
                        .find(|p| p.id == want.id)
                        .map(|p| serde_json::to_string(p).unwrap_or_default())
                ));
            }
        }
        let state = store
            .session(&tenant, &shared)
            .await
            .map_err(ctx_err("session(shared)"))?
            .ok_or("the shared session was lost")?;
        let max = shared_seq.load(Ordering::SeqCst);
        if state.seq != max {
            return Err(format!(
                "the shared session's seq is {}, the highest applied was {max}",
                state.seq
            ));
        }
        b.cleanup().await;
        Ok(())
    })
}
