//! `RedbStore` against real redb files in temporary directories: equal to `MemoryStore`
//! for random batches, atomic per batch, paging exactly once while appending, safe under
//! concurrent writers, and exact for JSON numbers.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::*;
use forge_core::{Cursor, MemoryStore, MessageId, PartId, SessionId, Store, SyncEvent};
use forge_redb::{Durability, RedbOptions, RedbStore};
use proptest::prelude::*;
use serde_json::json;

// ---------------------------------------------------------------------------------------
// 1. Differential: RedbStore equals MemoryStore

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases(32)))]

    #[test]
    fn random_batches_leave_redb_equal_to_the_memory_reference(
        batches in differential::batches()
    ) {
        let rt = runtime();
        let (_dir, db) = temp_store(RedbOptions::default());
        rt.block_on(differential::run(&db, &batches))?;
    }
}

// ---------------------------------------------------------------------------------------
// 3. Atomicity

#[test]
fn a_failing_batch_leaves_nothing_of_itself_behind() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("forge.redb");
    let base = atomicity_base();
    let (a, s1) = (tenant("a"), SessionId::from("ses_1"));
    let failing = failing_batches();
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
    #![proptest_config(ProptestConfig::with_cases(proptest_cases(32)))]

    #[test]
    fn paging_yields_every_message_exactly_once_while_appending(
        initial in 0..40usize,
        limit in 1..8usize,
        appends_per_page in 0..4usize,
    ) {
        let rt = runtime();
        let (_dir, db) = temp_store(RedbOptions {
            durability: Durability::None,
            ..RedbOptions::default()
        });
        let mem = MemoryStore::new();
        let t = tenant("a");
        let s = SessionId::from("ses_1");
        let new_message = |seq: u64| {
            let id = MessageId::generate();
            vec![
                put_message("a", "ses_1", id.as_str(), 0, seq),
                put_part("a", "ses_1", id.as_str(), PartId::generate().as_str(), 0, seq),
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
        ..RedbOptions::default()
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
        ..RedbOptions::default()
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
                            put_part("a", "shared", &m, &format!("prt_{w:02}_{i:03}"), 1, 2 + i),
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
