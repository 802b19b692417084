//! `RedbStore` against real redb files in temporary directories: equal to `MemoryStore`
//! for random batches, atomic per batch, paging exactly once while appending, safe under
//! concurrent writers, and exact for JSON numbers.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::*;
use forge_core::{Cursor, Envelope, MemoryStore, MessageId, SessionId, Store, SyncEvent};
use forge_redb::{Durability, RedbOptions, RedbStore};
use proptest::prelude::*;
use serde_json::json;

// ---------------------------------------------------------------------------------------
// 1. Differential: RedbStore equals MemoryStore

#[derive(Clone, Copy, Debug)]
enum Kind {
    PutSession,
    DeleteSession,
    PutMessage,
    RemoveMessage,
    PutPart,
    RemovePart,
}

#[derive(Clone, Debug)]
struct Ev {
    kind: Kind,
    tenant: usize,
    session: usize,
    message: usize,
    part: usize,
    variant: u8,
    seq: u64,
    /// Carry the event in an envelope of another session (must fail).
    mismatch: bool,
    /// Upsert the session (and message) first, so that a message or part upsert
    /// usually finds its parent; without it, it fails when the parent is missing.
    ensure_parents: bool,
    /// Upsert the same message or part again with this variant (a start boundary
    /// followed by its end, e.g. an open part closed); after a remove, recreate the
    /// removed message (which must come back without its old parts).
    then: Option<u8>,
}

/// An index into a pool, index `i` drawn with weight `weights[i]`: the first ids of a
/// pool come up more often, so rows are overwritten, removed and recreated within a
/// few batches.
fn weighted_index(weights: &[usize]) -> impl Strategy<Value = usize> {
    let choices: Vec<usize> = weights
        .iter()
        .enumerate()
        .flat_map(|(i, &w)| std::iter::repeat_n(i, w))
        .collect();
    prop::sample::select(choices)
}

fn ev_strategy() -> impl Strategy<Value = Ev> {
    let kind = prop_oneof![
        2 => Just(Kind::PutSession),
        2 => Just(Kind::DeleteSession),
        5 => Just(Kind::PutMessage),
        2 => Just(Kind::RemoveMessage),
        6 => Just(Kind::PutPart),
        2 => Just(Kind::RemovePart),
    ];
    (
        kind,
        weighted_index(&[3, 1]),
        weighted_index(&[4, 2, 1, 1, 1]),
        weighted_index(&[3, 2, 2, 1, 1, 1, 1]),
        weighted_index(&[2, 1, 1]),
        any::<u8>(),
        0..20u64,
        proptest::bool::weighted(0.02),
        proptest::bool::weighted(0.85),
        proptest::option::weighted(0.35, any::<u8>()),
    )
        .prop_map(
            |(
                kind,
                tenant,
                session,
                message,
                part,
                variant,
                seq,
                mismatch,
                ensure_parents,
                then,
            )| Ev {
                kind,
                tenant,
                session,
                message,
                part,
                variant,
                seq,
                mismatch,
                ensure_parents,
                then,
            },
        )
}

fn to_envelopes(ev: &Ev) -> Vec<Envelope<SyncEvent>> {
    let (t, s) = (TENANTS[ev.tenant], SESSIONS[ev.session]);
    let (m, p) = (MESSAGES[ev.message], PARTS[ev.part]);
    let mut out = Vec::new();
    if ev.ensure_parents && matches!(ev.kind, Kind::PutMessage | Kind::PutPart) {
        out.push(env(
            t,
            s,
            ev.seq,
            SyncEvent::SessionUpdated {
                info: session(s, ev.variant / 2),
            },
        ));
        if matches!(ev.kind, Kind::PutPart) {
            out.push(put_message(t, s, m, ev.variant / 3, ev.seq));
        }
    }
    let mut e = match ev.kind {
        Kind::PutSession => env(
            t,
            s,
            ev.seq,
            SyncEvent::SessionUpdated {
                info: session(s, ev.variant),
            },
        ),
        Kind::DeleteSession => env(
            t,
            s,
            ev.seq,
            SyncEvent::SessionDeleted {
                session_id: s.into(),
            },
        ),
        Kind::PutMessage => put_message(t, s, m, ev.variant, ev.seq),
        Kind::RemoveMessage => env(
            t,
            s,
            ev.seq,
            SyncEvent::MessageRemoved {
                session_id: s.into(),
                message_id: m.into(),
            },
        ),
        Kind::PutPart => put_part(t, s, m, p, ev.variant, ev.seq),
        Kind::RemovePart => env(
            t,
            s,
            ev.seq,
            SyncEvent::PartRemoved {
                session_id: s.into(),
                message_id: m.into(),
                part_id: p.into(),
            },
        ),
    };
    if ev.mismatch {
        e.session_id = SESSIONS[(ev.session + 1) % SESSIONS.len()].into();
    }
    out.push(e);
    match (ev.kind, ev.then) {
        // Recreating a removed message: it must come back without its old parts.
        (Kind::PutMessage | Kind::RemoveMessage, Some(v)) => {
            out.push(put_message(t, s, m, v, ev.seq + 1));
        }
        (Kind::PutPart, Some(v)) => out.push(put_part(t, s, m, p, v, ev.seq + 1)),
        (Kind::DeleteSession, Some(v)) => {
            out.push(env(
                t,
                s,
                ev.seq + 1,
                SyncEvent::SessionUpdated {
                    info: session(s, v),
                },
            ));
            out.push(put_message(t, s, m, v, ev.seq + 1));
        }
        _ => {}
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases()))]

    #[test]
    fn random_batches_leave_redb_equal_to_the_memory_reference(
        batches in prop::collection::vec(prop::collection::vec(ev_strategy(), 0..5), 1..20)
    ) {
        let rt = runtime();
        let (_dir, db) = temp_store(RedbOptions::default());
        let mem = MemoryStore::new();
        rt.block_on(async {
            for (i, batch) in batches.iter().enumerate() {
                let batch: Vec<_> = batch.iter().flat_map(to_envelopes).collect();
                let want = outcome(&mem.apply(&batch).await);
                let got = outcome(&db.apply(&batch).await);
                prop_assert_eq!(&want, &got, "batch {} result", i);
                assert_same_reads(&mem, &db).await?;
            }
            Ok(())
        })?;
    }
}

// ---------------------------------------------------------------------------------------
// 3. Atomicity

#[test]
fn a_failing_batch_leaves_nothing_of_itself_behind() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("forge.redb");
    let base = vec![vec![
        put_session("a", "ses_1", 1),
        put_message("a", "ses_1", "msg_1", 1, 2),
        put_part("a", "ses_1", "msg_1", "prt_1", 1, 3),
        put_session("b", "ses_2", 1),
    ]];
    let (a, s1) = (tenant("a"), SessionId::from("ses_1"));
    let failing: Vec<(Vec<Envelope<SyncEvent>>, &str)> = vec![
        (
            vec![
                put_session("a", "ses_1", 50),
                put_message("a", "ses_1", "msg_1", 2, 51),
                put_message("a", "ses_1", "msg_2", 1, 52),
                put_part("a", "ses_1", "msg_2", "prt_1", 4, 53),
                env(
                    "b",
                    "ses_2",
                    54,
                    SyncEvent::SessionDeleted {
                        session_id: "ses_2".into(),
                    },
                ),
                // The message was never created: NotFound, and all of the above undone.
                put_part("a", "ses_1", "msg_9", "prt_1", 0, 55),
            ],
            "NotFound",
        ),
        (
            vec![
                env(
                    "a",
                    "ses_1",
                    60,
                    SyncEvent::MessageRemoved {
                        session_id: "ses_1".into(),
                        message_id: "msg_1".into(),
                    },
                ),
                // A part for the message removed earlier in the same batch.
                put_part("a", "ses_1", "msg_1", "prt_2", 0, 61),
            ],
            "NotFound",
        ),
        (
            vec![
                put_message("a", "ses_1", "msg_3", 0, 70),
                // An event of ses_10 in an envelope of ses_1.
                Envelope {
                    session_id: "ses_1".into(),
                    ..put_session("a", "ses_10", 71)
                },
            ],
            "InvalidInput",
        ),
    ];
    rt.block_on(async {
        let store = RedbStore::open(&path).unwrap();
        apply_all(&store, &base).await;
        for (batch, kind) in &failing {
            let got = outcome(&store.apply(batch).await);
            assert!(got.starts_with(kind), "{got}");
        }
        let mem = reference(&base).await;
        assert_same_reads(&mem, &store).await.unwrap();
        let state = store.session(&a, &s1).await.unwrap().unwrap();
        assert_eq!(state.seq, 3);
        let open = store.open_items(&a, None).await.unwrap();
        assert_eq!((open.messages.len(), open.parts.len()), (1, 1));
    });
    // Nothing of the failed batches reached the file either.
    rt.block_on(async {
        let store = RedbStore::open(&path).unwrap();
        assert_same_reads(&reference(&base).await, &store)
            .await
            .unwrap();
    });
}

// ---------------------------------------------------------------------------------------
// 5. Paging while appending

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases()))]

    #[test]
    fn paging_yields_every_message_exactly_once_while_appending(
        initial in 0..40usize,
        limit in 1..8usize,
        appends_per_page in 0..4usize,
    ) {
        let rt = runtime();
        let (_dir, db) = temp_store(RedbOptions { durability: Durability::None });
        let mem = MemoryStore::new();
        let t = tenant("a");
        let s = SessionId::from("ses_1");
        let new_message = |seq: u64| {
            let id = MessageId::generate();
            vec![
                put_message("a", "ses_1", id.as_str(), 0, seq),
                put_part("a", "ses_1", id.as_str(), "prt_1", 0, seq),
            ]
        };
        rt.block_on(async {
            let mut seq = 1;
            let mut ids = Vec::new();
            let first = vec![put_session("a", "ses_1", seq)];
            mem.apply(&first).await.unwrap();
            db.apply(&first).await.unwrap();
            for _ in 0..initial {
                seq += 1;
                let batch = new_message(seq);
                ids.push(batch[0].event.clone());
                mem.apply(&batch).await.unwrap();
                db.apply(&batch).await.unwrap();
            }
            let want: Vec<MessageId> = ids
                .iter()
                .map(|e| match e {
                    SyncEvent::MessageUpdated { info } => info.id.clone(),
                    _ => unreachable!(),
                })
                .collect();

            let mut seen: Vec<Vec<MessageId>> = Vec::new();
            let mut cursor: Option<Cursor> = None;
            loop {
                let page = db.messages(&t, &s, cursor.as_ref(), limit).await.unwrap();
                let reference = mem.messages(&t, &s, cursor.as_ref(), limit).await.unwrap();
                prop_assert_eq!(&page, &reference);
                prop_assert!(page.messages.len() <= limit);
                prop_assert!(page.messages.iter().all(|m| m.parts.len() == 1));
                seen.push(page.messages.iter().map(|m| m.info.id.clone()).collect());
                for _ in 0..appends_per_page {
                    seq += 1;
                    let batch = new_message(seq);
                    mem.apply(&batch).await.unwrap();
                    db.apply(&batch).await.unwrap();
                }
                match page.next {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            let got: Vec<MessageId> = seen.into_iter().rev().flatten().collect();
            let unique: BTreeSet<&MessageId> = got.iter().collect();
            prop_assert_eq!(unique.len(), got.len(), "a message was seen twice");
            prop_assert_eq!(got, want);
            Ok(())
        })?;
    }
}

#[test]
fn a_cursor_below_every_id_gives_an_empty_last_page() {
    let rt = runtime();
    let (_dir, db) = temp_store(RedbOptions::default());
    rt.block_on(async {
        apply_all(&db, &sample_history()).await;
        let page = db
            .messages(
                &tenant("a"),
                &"ses_1".into(),
                Some(&Cursor::before("".into())),
                10,
            )
            .await
            .unwrap();
        assert!(page.messages.is_empty() && page.next.is_none(), "{page:?}");
        // And an unknown session is an empty page.
        let page = db
            .messages(&tenant("a"), &"ses_404".into(), None, 10)
            .await
            .unwrap();
        assert!(page.messages.is_empty() && page.next.is_none());
    });
}

// ---------------------------------------------------------------------------------------
// Capabilities and concurrency

#[test]
fn capabilities_follow_the_durability_option() {
    let (_d1, durable) = temp_store(RedbOptions::default());
    let caps = durable.capabilities();
    assert_eq!(caps.name, "redb");
    assert!(caps.durable && caps.transactions && caps.concurrent_writers);
    assert_eq!(caps.tenancy, forge_core::Tenancy::Keyed);
    let (_d2, fast) = temp_store(RedbOptions {
        durability: Durability::None,
    });
    assert!(!fast.capabilities().durable);
}

#[test]
fn concurrent_writers_lose_no_update() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    let (_dir, db) = temp_store(RedbOptions {
        durability: Durability::None,
    });
    let db = Arc::new(db);
    let writers = 8;
    let per_writer = 25;
    rt.block_on(async {
        db.apply(&[put_session("a", "shared", 1)]).await.unwrap();
        let tasks: Vec<_> = (0..writers)
            .map(|w| {
                let db = Arc::clone(&db);
                tokio::spawn(async move {
                    let own = format!("ses_w{w}");
                    db.apply(&[put_session("a", &own, 1)]).await.unwrap();
                    for i in 0..per_writer {
                        let m = format!("msg_{w:02}_{i:03}");
                        db.apply(&[
                            put_message("a", &own, &m, 0, 2 + i),
                            put_message("a", "shared", &m, 1, 2 + i),
                            put_part("a", "shared", &m, "prt_1", 1, 2 + i),
                        ])
                        .await
                        .unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let a = tenant("a");
        let shared = all_pages(db.as_ref(), &a, &"shared".into(), 1000)
            .await
            .unwrap();
        assert_eq!(shared[0].messages.len(), (writers * per_writer) as usize);
        let open = db.open_items(&a, Some(&"shared".into())).await.unwrap();
        assert_eq!(open.messages.len(), (writers * per_writer) as usize);
        assert_eq!(open.parts.len(), (writers * per_writer) as usize);
        for w in 0..writers {
            let own = SessionId::from(format!("ses_w{w}"));
            let state = db.session(&a, &own).await.unwrap().unwrap();
            assert_eq!(state.seq, 1 + per_writer);
            let page = db.messages(&a, &own, None, 1000).await.unwrap();
            assert_eq!(page.messages.len(), per_writer as usize);
        }
    });
}

/// Floats whose shortest decimal form serde_json's default (fast) parser reads back one
/// ulp off; the crate enables serde_json's `float_roundtrip` so rows read back exactly.
const HARD_FLOATS: [f64; 3] = [
    7.328_930_366_960_503_5,
    1.631_845_652_050_215_8e-21,
    2.109_087_688_342_284_4e-109,
];

#[test]
fn json_numbers_read_back_bit_for_bit() {
    let rt = runtime();
    let (_dir, db) = temp_store(RedbOptions::default());
    let mut msg = message("ses_1", "msg_1", 2);
    msg.as_assistant_mut().unwrap().cost = HARD_FLOATS[0];
    let mut prt = part("ses_1", "msg_1", "prt_1", 6);
    let json = serde_json::to_value(&prt).unwrap();
    let mut json = json.as_object().unwrap().clone();
    json.insert("weight".into(), json!(HARD_FLOATS[1]));
    json["state"]["metadata"] = json!({"score": HARD_FLOATS[2]});
    prt = serde_json::from_value(serde_json::Value::Object(json)).unwrap();
    rt.block_on(async {
        db.apply(&[
            put_session("a", "ses_1", 1),
            env(
                "a",
                "ses_1",
                2,
                SyncEvent::MessageUpdated { info: msg.clone() },
            ),
            env(
                "a",
                "ses_1",
                3,
                SyncEvent::PartUpdated { part: prt.clone() },
            ),
        ])
        .await
        .unwrap();
        let got = db
            .message(&tenant("a"), &"ses_1".into(), &"msg_1".into())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            got.info.as_assistant().unwrap().cost.to_bits(),
            HARD_FLOATS[0].to_bits()
        );
        assert_eq!(got.info, msg);
        assert_eq!(got.parts, vec![prt]);
    });
}
