//! The read path (docs/design.md §5): paging and `filter_compacted`.

mod common;

use std::sync::Arc;

use forge_core::id::now_ms;
use forge_core::model::{CompactionPart, ErrorName, JsonMap, MessageError, PartBody};
use forge_core::processor::assistant_message;
use forge_core::read::filter_compacted_paged;
use forge_core::{
    filter_compacted_reference, read_all, CountingStore, Cursor, Envelope, MemoryStore, MessageId,
    MessageWithParts, Part, PartId, Session, SessionId, Store, SyncEvent, TenantId,
};
use forge_testkit::current_thread_runtime;
use proptest::prelude::*;

fn cases(default: u32) -> u32 {
    std::env::var("FORGE_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One message of a generated history.
#[derive(Clone, Debug)]
enum Spec {
    User,
    /// A user message asking for compaction; the tail starts this many messages back.
    Compaction {
        tail_back: Option<usize>,
    },
    Assistant,
    /// A summary answering the most recent compaction request.
    Summary {
        finish: bool,
        error: bool,
    },
}

/// A compaction request that keeps no tail.
const COMPACTION: Spec = Spec::Compaction { tail_back: None };

/// A summary that finished without an error: its compaction is a boundary.
const GOOD_SUMMARY: Spec = Spec::Summary {
    finish: true,
    error: false,
};

fn build(session: &SessionId, specs: &[Spec]) -> Vec<MessageWithParts> {
    let mut out: Vec<MessageWithParts> = Vec::new();
    let mut last_user: Option<MessageId> = None;
    let mut last_compaction: Option<MessageId> = None;
    for spec in specs {
        let (user, text) = common::user_message(session, "u");
        let mut m = match spec {
            Spec::User | Spec::Compaction { .. } => user,
            Spec::Assistant | Spec::Summary { .. } => {
                let parent = match spec {
                    Spec::Summary { .. } => last_compaction.clone(),
                    _ => None,
                }
                .or_else(|| last_user.clone())
                .unwrap_or_else(|| "msg_none".into());
                assistant_message(session.clone(), parent, "p", "m", now_ms())
            }
        };
        let mut parts = Vec::new();
        match spec {
            Spec::User => parts.push(text),
            Spec::Compaction { tail_back } => {
                let tail = tail_back
                    .and_then(|n| out.len().checked_sub(n))
                    .and_then(|i| out.get(i))
                    .map(|m| m.info.id.clone());
                parts.push(Part {
                    id: PartId::generate(),
                    session_id: session.clone(),
                    message_id: m.id.clone(),
                    body: PartBody::Compaction(CompactionPart {
                        auto: true,
                        overflow: None,
                        tail_start_id: tail,
                        extra: JsonMap::new(),
                    }),
                });
                last_compaction = Some(m.id.clone());
            }
            Spec::Assistant => {}
            Spec::Summary { finish, error } => {
                let a = m.as_assistant_mut().unwrap();
                a.summary = Some(true);
                a.finish = finish.then(|| "stop".to_owned());
                a.error = error.then(|| MessageError::new(ErrorName::Api, "boom"));
            }
        }
        if let Some(a) = m.as_assistant_mut() {
            a.time.completed = Some(now_ms());
        }
        if m.is_user() {
            last_user = Some(m.id.clone());
        }
        out.push(MessageWithParts { info: m, parts });
    }
    out
}

async fn store_with(
    tenant: &TenantId,
    history: &[MessageWithParts],
) -> (Arc<MemoryStore>, SessionId) {
    let store = Arc::new(MemoryStore::new());
    let session = history
        .first()
        .map_or_else(SessionId::generate, |m| m.info.session_id.clone());
    let mut info = Session::new("t", now_ms());
    info.id = session.clone();
    let mut batch = vec![SyncEvent::SessionUpdated { info }];
    for m in history {
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
    let batch: Vec<_> = batch
        .into_iter()
        .enumerate()
        .map(|(i, event)| Envelope {
            tenant: tenant.clone(),
            session_id: session.clone(),
            seq: i as u64 + 1,
            epoch: None,
            event,
        })
        .collect();
    store.apply(&batch).await.unwrap();
    (store, session)
}

fn positions(history: &[MessageWithParts], view: &[MessageWithParts]) -> Vec<usize> {
    view.iter()
        .map(|v| history.iter().position(|h| h.info.id == v.info.id).unwrap())
        .collect()
}

/// A history of `specs` in a new session, with the positions in it of its view's
/// messages.
fn history_and_view(specs: &[Spec]) -> (Vec<MessageWithParts>, Vec<usize>) {
    let h = build(&SessionId::generate(), specs);
    let view = positions(&h, &filter_compacted_reference(&h).messages);
    (h, view)
}

#[test]
fn view_starts_at_a_successful_compaction() {
    use Spec::*;
    let (h, view) = history_and_view(&[User, Assistant, COMPACTION, GOOD_SUMMARY, User, Assistant]);
    assert_eq!(view, [2, 3, 4, 5]);
    let v = filter_compacted_reference(&h);
    assert_eq!(v.boundary.as_ref(), Some(&h[2].info.id));
}

#[test]
fn a_failed_or_unfinished_summary_is_not_a_boundary() {
    use Spec::*;
    for summary in [
        Summary {
            finish: true,
            error: true,
        },
        Summary {
            finish: false,
            error: false,
        },
    ] {
        let (h, view) = history_and_view(&[User, Assistant, COMPACTION, summary, User]);
        assert_eq!(view, [0, 1, 2, 3, 4]);
        assert_eq!(filter_compacted_reference(&h).boundary, None);
    }
    // A compaction request nobody answered is no boundary either.
    let (_, view) = history_and_view(&[User, COMPACTION, Assistant]);
    assert_eq!(view.len(), 3);
}

#[test]
fn nested_compactions_cut_at_the_newest_successful_one() {
    use Spec::*;
    let failed = Summary {
        finish: true,
        error: true,
    };
    // The newer compaction's summary succeeded, then failed.
    for (newer, expected) in [
        (GOOD_SUMMARY, &[4, 5, 6][..]),
        (failed, &[1, 2, 3, 4, 5, 6]),
    ] {
        let (_, view) = history_and_view(&[
            User,
            COMPACTION,
            GOOD_SUMMARY,
            User,
            COMPACTION,
            newer,
            User,
        ]);
        assert_eq!(view, expected);
    }
}

#[test]
fn a_tail_is_placed_after_the_summary() {
    use Spec::*;
    let (h, view) = history_and_view(&[
        User,
        Assistant,
        User,
        Assistant,
        Compaction { tail_back: Some(2) },
        GOOD_SUMMARY,
        User,
        Assistant,
    ]);
    assert_eq!(view, [4, 5, 2, 3, 6, 7]);
    assert_eq!(filter_compacted_reference(&h).tail, 2);
}

#[test]
fn the_view_through_a_store_stops_reading_at_the_boundary() {
    use Spec::*;
    let rt = current_thread_runtime();
    let tenant = TenantId::default();
    let s = SessionId::generate();
    let mut specs: Vec<Spec> = (0..1000)
        .map(|i| if i % 2 == 0 { User } else { Assistant })
        .collect();
    specs[980] = COMPACTION;
    specs[981] = GOOD_SUMMARY;
    let h = build(&s, &specs);
    rt.block_on(async {
        let (mem, session) = store_with(&tenant, &h).await;
        let counting = CountingStore::new(mem.clone());
        let v = filter_compacted_paged(&counting, &tenant, &session, 50)
            .await
            .unwrap();
        assert_eq!(v.messages.len(), 20);
        assert_eq!(counting.totals().page_reads, 1, "read past the boundary");

        // With a tail 80 messages back the view reads only as far as the tail.
        let mut specs = specs.clone();
        specs[980] = Compaction {
            tail_back: Some(80),
        };
        let h = build(&s, &specs);
        let (mem, session) = store_with(&tenant, &h).await;
        let counting = CountingStore::new(mem);
        let v = filter_compacted_paged(&counting, &tenant, &session, 50)
            .await
            .unwrap();
        assert_eq!(v.messages.len(), 100);
        assert!(counting.totals().page_reads <= 3, "{:?}", counting.totals());
        assert_eq!(v, filter_compacted_reference(&h));
    });
}

fn spec() -> impl Strategy<Value = Spec> {
    prop_oneof![
        4 => Just(Spec::User),
        4 => Just(Spec::Assistant),
        1 => proptest::option::of(0usize..8).prop_map(|tail_back| Spec::Compaction { tail_back }),
        2 => (any::<bool>(), any::<bool>()).prop_map(|(finish, error)| Spec::Summary { finish, error }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(64)))]

    /// The view read page by page through a store equals the reference over the full
    /// history, for any page size.
    #[test]
    fn paged_view_equals_the_reference(specs in proptest::collection::vec(spec(), 0..60), page in 1usize..12) {
        let rt = current_thread_runtime();
        let tenant = TenantId::default();
        let h = build(&SessionId::generate(), &specs);
        let (mem, session) = rt.block_on(store_with(&tenant, &h));
        let paged = rt.block_on(filter_compacted_paged(mem.as_ref(), &tenant, &session, page)).unwrap();
        prop_assert_eq!(paged, filter_compacted_reference(&h));
    }

    /// Paging to the end yields every message exactly once, in order, also when
    /// messages are appended between page reads.
    #[test]
    fn paging_yields_every_message_once_while_appending(n in 0usize..80, page in 1usize..15, appends in proptest::collection::vec(0usize..4, 0..20)) {
        let rt = current_thread_runtime();
        let tenant = TenantId::default();
        let h = build(&SessionId::generate(), &vec![Spec::User; n]);
        rt.block_on(async {
            let (mem, session) = store_with(&tenant, &h).await;
            let mut seen: Vec<MessageId> = Vec::new();
            let mut cursor: Option<Cursor> = None;
            let mut first = true;
            let mut appended = 0u64;
            let mut round = 0;
            while first || cursor.is_some() {
                first = false;
                let p = mem.messages(&tenant, &session, cursor.as_ref(), page).await.unwrap();
                prop_assert!(p.messages.len() <= page);
                prop_assert!(p.messages.windows(2).all(|w| w[0].info.id < w[1].info.id));
                seen.splice(0..0, p.messages.iter().map(|m| m.info.id.clone()));
                cursor = p.next.map(|c| c.to_string().parse().unwrap());
                for _ in 0..appends.get(round).copied().unwrap_or(0) {
                    let (m, part) = common::user_message(&session, "late");
                    appended += 1;
                    mem.apply(&[
                        Envelope { tenant: tenant.clone(), session_id: session.clone(), seq: 10_000 + appended * 2, epoch: None, event: SyncEvent::MessageUpdated { info: m } },
                        Envelope { tenant: tenant.clone(), session_id: session.clone(), seq: 10_001 + appended * 2, epoch: None, event: SyncEvent::PartUpdated { part } },
                    ]).await.unwrap();
                }
                round += 1;
            }
            let expected: Vec<MessageId> = h.iter().map(|m| m.info.id.clone()).collect();
            prop_assert_eq!(seen, expected);
            let all = read_all(mem.as_ref(), &tenant, &session, page).await.unwrap();
            prop_assert_eq!(all.len() as u64, n as u64 + appended);
            Ok(())
        })?;
    }
}

#[test]
fn limits_are_capped_and_cursors_are_opaque_but_checked() {
    let rt = current_thread_runtime();
    let tenant = TenantId::default();
    let h = build(&SessionId::generate(), &vec![Spec::User; 1200]);
    rt.block_on(async {
        let (mem, session) = store_with(&tenant, &h).await;
        let p = mem.messages(&tenant, &session, None, 0).await.unwrap();
        assert_eq!(p.messages.len(), forge_core::DEFAULT_PAGE_LIMIT);
        let p = mem.messages(&tenant, &session, None, 5000).await.unwrap();
        assert_eq!(p.messages.len(), forge_core::MAX_PAGE_LIMIT);
        let c = p.next.unwrap();
        assert_eq!(c.to_string().parse::<Cursor>().unwrap(), c);
        let p = mem
            .messages(&tenant, &session, Some(&c), 5000)
            .await
            .unwrap();
        assert_eq!(p.messages.len(), 200);
        assert!(p.next.is_none());
    });
    for bad in ["", "c1.", "c1.zz", "x.6d7367", "c1.6d7"] {
        let err = bad.parse::<Cursor>().unwrap_err().to_string();
        assert!(err.contains("malformed page cursor"), "{bad}: {err}");
    }
    // Found by fuzzing: the error quoted the whole input, megabytes for a huge one.
    let huge = format!("c1.{}", "{\"a\":".repeat(100_000));
    let err = huge.parse::<Cursor>().unwrap_err().to_string();
    assert!(
        err.contains("malformed page cursor") && err.len() < 200,
        "{err}"
    );
}
