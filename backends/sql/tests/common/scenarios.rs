//! Hand-written batches whose later events depend on earlier ones of the same batch.

use forge_core::{Envelope, MemoryStore, Store, SyncEvent};

use super::*;

fn remove_message(t: &str, s: &str, m: &str, seq: u64) -> Envelope<SyncEvent> {
    env(
        t,
        s,
        seq,
        SyncEvent::MessageRemoved {
            session_id: s.into(),
            message_id: m.into(),
        },
    )
}

fn remove_part(t: &str, s: &str, m: &str, p: &str, seq: u64) -> Envelope<SyncEvent> {
    env(
        t,
        s,
        seq,
        SyncEvent::PartRemoved {
            session_id: s.into(),
            message_id: m.into(),
            part_id: p.into(),
        },
    )
}

fn delete_session(t: &str, s: &str, seq: u64) -> Envelope<SyncEvent> {
    env(
        t,
        s,
        seq,
        SyncEvent::SessionDeleted {
            session_id: s.into(),
        },
    )
}

/// A base history, then batches whose later events depend on earlier ones of the same
/// batch (removed then recreated, deleted then reused, upserted then removed), some of
/// which must fail as a whole. Applied in order; each must end as in `MemoryStore`.
pub fn in_batch_scenarios() -> Vec<Vec<Envelope<SyncEvent>>> {
    vec![
        // Base.
        vec![
            put_session("a", "ses_1", 1),
            put_message("a", "ses_1", "msg_1", 0, 2),
            put_part("a", "ses_1", "msg_1", "prt_1", 1, 3),
            put_part("a", "ses_1", "msg_1", "prt_2", 3, 4),
            put_message("a", "ses_1", "msg_2", 1, 5),
            put_part("a", "ses_1", "msg_2", "prt_1", 5, 6),
            put_session("a", "ses_10", 1),
        ],
        // A part written, its message removed and recreated: only the later part stays.
        vec![
            put_part("a", "ses_1", "msg_1", "prt_10", 0, 7),
            remove_message("a", "ses_1", "msg_1", 8),
            put_message("a", "ses_1", "msg_1", 2, 9),
            put_part("a", "ses_1", "msg_1", "prt_2", 6, 10),
        ],
        // A part written, then its message removed.
        vec![
            put_part("a", "ses_1", "msg_2", "prt_10", 4, 11),
            remove_message("a", "ses_1", "msg_2", 12),
        ],
        // A part overwritten, removed, written, removed.
        vec![
            remove_part("a", "ses_1", "msg_1", "prt_2", 13),
            put_part("a", "ses_1", "msg_1", "prt_2", 1, 14),
            put_part("a", "ses_1", "msg_1", "prt_2", 7, 15),
            remove_part("a", "ses_1", "msg_1", "prt_2", 16),
            put_part("a", "ses_1", "msg_1", "prt_1", 3, 17),
        ],
        // A message written, removed, then a part for it: NotFound, nothing kept.
        vec![
            put_message("a", "ses_1", "msg_3", 1, 18),
            remove_message("a", "ses_1", "msg_3", 19),
            put_part("a", "ses_1", "msg_3", "prt_1", 1, 20),
        ],
        // A part naming a message of another session: NotFound.
        vec![
            put_session("a", "ses_10", 30),
            put_part("a", "ses_10", "msg_1", "prt_1", 1, 31),
        ],
        // A session deleted, then a message for it: NotFound, the session stays.
        vec![
            delete_session("a", "ses_1", 40),
            put_message("a", "ses_1", "msg_1", 0, 41),
        ],
        // A session deleted and recreated: it starts empty, with the new seq.
        vec![
            put_part("a", "ses_1", "msg_1", "prt_10", 2, 50),
            put_message("a", "ses_1", "msg_3", 2, 50),
            delete_session("a", "ses_1", 51),
            put_session("a", "ses_1", 3),
            put_message("a", "ses_1", "msg_2", 3, 4),
            put_part("a", "ses_1", "msg_2", "prt_1", 0, 5),
        ],
        // Removals of absent rows still raise the seq; a lower seq never lowers it.
        vec![
            remove_part("a", "ses_10", "msg_9", "prt_9", 100),
            remove_message("a", "ses_10", "msg_9", 99),
            put_session("a", "ses_10", 7),
            remove_message("a", "ses_404", "msg_1", 500),
            delete_session("b", "ses_404", 501),
        ],
        // The same ids in two tenants, in one batch.
        vec![
            put_session("b", "ses_1", 1),
            put_message("b", "ses_1", "msg_2", 2, 2),
            put_part("a", "ses_1", "msg_2", "prt_2", 6, 60),
            put_part("b", "ses_1", "msg_2", "prt_2", 1, 3),
            remove_message("a", "ses_1", "msg_2", 61),
        ],
        // One failing event in another tenant undoes the whole batch.
        vec![
            put_message("a", "ses_1", "msg_4", 1, 70),
            put_part("b", "ses_1", "msg_404", "prt_1", 0, 71),
        ],
    ]
}

/// Applies [`in_batch_scenarios`] to `db` and `MemoryStore`, comparing every outcome and
/// every read.
pub async fn assert_scenarios_match_reference(db: &dyn Store) {
    let mem = MemoryStore::new();
    let mut failures = 0;
    for (i, batch) in in_batch_scenarios().iter().enumerate() {
        let want = outcome(&mem.apply(batch).await);
        let got = outcome(&db.apply(batch).await);
        assert_eq!(want, got, "scenario {i}");
        failures += usize::from(want != "ok");
        assert_same_reads(&mem, db)
            .await
            .unwrap_or_else(|e| panic!("scenario {i}: {e}"));
    }
    // The fixture is not vacuous: four scenarios fail, the rest change something.
    assert_eq!(failures, 4);
}
