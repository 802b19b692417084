//! The simulation against hand-written batches.

use super::*;
use serde_json::json;

fn tenant() -> TenantId {
    TenantId::new("a").unwrap()
}

/// `err` is a `NotFound` of `what` ("message", "session").
fn assert_not_found(err: &Error, what: &str) {
    assert!(
        matches!(err, Error::NotFound { what: w, .. } if *w == what),
        "{err}"
    );
}

/// `ops` delete exactly part `p` of message `m` of session `s`.
fn assert_deletes_part_p(ops: &TenantOps, m: &str) {
    assert_eq!(
        ops.delete_parts,
        [(SessionId::from("s"), MessageId::from(m), PartId::from("p"))]
    );
}

fn env(seq: u64, event: SyncEvent) -> Envelope<SyncEvent> {
    Envelope {
        tenant: tenant(),
        session_id: event.session_id().clone(),
        seq,
        epoch: None,
        event,
    }
}

fn put_session(s: &str, seq: u64) -> Envelope<SyncEvent> {
    let info =
        serde_json::from_value(json!({"id": s, "time": {"created": 1, "updated": 1}})).unwrap();
    env(seq, SyncEvent::SessionUpdated { info })
}

fn put_message(s: &str, m: &str, seq: u64) -> Envelope<SyncEvent> {
    let info = serde_json::from_value(json!({
        "id": m, "sessionID": s, "role": "user", "time": {"created": 1}, "agent": "a",
    }))
    .unwrap();
    env(seq, SyncEvent::MessageUpdated { info })
}

fn put_part(s: &str, m: &str, p: &str, seq: u64) -> Envelope<SyncEvent> {
    let part = serde_json::from_value(json!({
        "id": p, "sessionID": s, "messageID": m, "type": "text", "text": "x",
        "time": {"start": 1},
    }))
    .unwrap();
    env(seq, SyncEvent::PartUpdated { part })
}

fn remove_message(s: &str, m: &str, seq: u64) -> Envelope<SyncEvent> {
    env(
        seq,
        SyncEvent::MessageRemoved {
            session_id: s.into(),
            message_id: m.into(),
        },
    )
}

fn stored(sessions: &[(&str, u64)], messages: &[(&str, &str)]) -> Loaded {
    Loaded {
        sessions: sessions
            .iter()
            .map(|(s, seq)| {
                (
                    (tenant(), SessionId::from(*s)),
                    StoredSession {
                        seq: *seq,
                        body: format!("{{\"id\":\"{s}\"}}"),
                    },
                )
            })
            .collect(),
        messages: messages
            .iter()
            .map(|(s, m)| (tenant(), SessionId::from(*s), MessageId::from(*m)))
            .collect(),
        part_messages: HashMap::new(),
        fences: HashMap::new(),
    }
}

#[test]
fn a_part_upserted_under_another_message_moves_there() {
    let batch = [put_part("s", "m2", "p", 3)];
    let b = Batch::prepare(&batch, false);
    assert_eq!(
        b.needs().parts[&tenant()],
        BTreeSet::from([(SessionId::from("s"), PartId::from("p"))])
    );
    let mut loaded = stored(&[("s", 1)], &[("s", "m1"), ("s", "m2")]);
    loaded
        .part_messages
        .insert((tenant(), "s".into(), "p".into()), vec!["m1".into()]);
    let plan = b.simulate(&loaded).unwrap();
    let ops = &plan.tenants[&tenant()];
    assert_deletes_part_p(ops, "m1");
    assert_eq!(ops.put_parts[0].message.as_str(), "m2");
    // Moved and moved back in one batch: one row, under the first message.
    let batch = [put_part("s", "m2", "p", 3), put_part("s", "m1", "p", 4)];
    let plan = Batch::prepare(&batch, false).simulate(&loaded).unwrap();
    let ops = &plan.tenants[&tenant()];
    assert_deletes_part_p(ops, "m2");
    assert_eq!(ops.put_parts.len(), 1);
    assert_eq!(ops.put_parts[0].message.as_str(), "m1");
    // The message holding it was removed first: nothing to move.
    let batch = [remove_message("s", "m1", 3), put_part("s", "m2", "p", 4)];
    let plan = Batch::prepare(&batch, false).simulate(&loaded).unwrap();
    let ops = &plan.tenants[&tenant()];
    assert!(ops.delete_parts.is_empty(), "{:?}", ops.delete_parts);
}

#[test]
fn repeated_upserts_collapse_to_the_last_version_of_each_row() {
    let batch = [
        put_message("s", "m", 4),
        put_part("s", "m", "p", 5),
        put_part("s", "m", "p", 6),
        put_part("s", "m", "q", 7),
    ];
    let b = Batch::prepare(&batch, false);
    let needs = b.needs();
    // The message is written first, so its stored existence does not matter.
    assert!(needs.messages.is_empty());
    let plan = b.simulate(&stored(&[("s", 3)], &[])).unwrap();
    let ops = &plan.tenants[&tenant()];
    assert_eq!(ops.put_parts.len(), 2);
    assert_eq!(ops.put_messages.len(), 1);
    assert_eq!(ops.put_sessions[0].seq, 7);
    assert_eq!(ops.put_sessions[0].body, "{\"id\":\"s\"}");
    assert!(ops.delete_messages.is_empty() && ops.delete_parts.is_empty());
}

#[test]
fn a_part_for_a_message_removed_earlier_in_the_batch_is_not_found() {
    let batch = [remove_message("s", "m", 2), put_part("s", "m", "p", 3)];
    let b = Batch::prepare(&batch, false);
    assert!(b.needs().messages.is_empty());
    let err = b.simulate(&stored(&[("s", 1)], &[("s", "m")])).unwrap_err();
    assert_not_found(&err, "message");
}

#[test]
fn a_recreated_message_deletes_the_stored_one_first() {
    let batch = [
        put_part("s", "m", "old", 2),
        remove_message("s", "m", 3),
        put_message("s", "m", 4),
        put_part("s", "m", "new", 5),
    ];
    let b = Batch::prepare(&batch, false);
    assert_eq!(b.needs().messages[&tenant()].len(), 1);
    let plan = b.simulate(&stored(&[("s", 1)], &[("s", "m")])).unwrap();
    let ops = &plan.tenants[&tenant()];
    assert_eq!(ops.delete_messages, vec![("s".into(), "m".into())]);
    let parts: Vec<&str> = ops.put_parts.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(parts, ["new"]);
}

#[test]
fn a_deleted_and_recreated_session_restarts_its_seq() {
    let del = env(
        9,
        SyncEvent::SessionDeleted {
            session_id: "s".into(),
        },
    );
    let batch = [del, put_session("s", 2), put_part("s", "m", "p", 3)];
    let b = Batch::prepare(&batch, false);
    // The session was deleted before the part: its stored messages are gone.
    assert!(b.needs().messages.is_empty());
    let err = b.simulate(&stored(&[("s", 5)], &[("s", "m")])).unwrap_err();
    assert_not_found(&err, "message");

    let del = env(
        9,
        SyncEvent::SessionDeleted {
            session_id: "s".into(),
        },
    );
    let plan = Batch::prepare(&[del, put_session("s", 2)], false)
        .simulate(&stored(&[("s", 5)], &[]))
        .unwrap();
    let ops = &plan.tenants[&tenant()];
    assert_eq!(ops.delete_sessions, vec![SessionId::from("s")]);
    assert_eq!(ops.put_sessions[0].seq, 2);
}

#[test]
fn the_first_failing_event_decides_and_removals_of_absent_rows_are_no_ops() {
    let mut mismatched = put_session("other", 1);
    mismatched.session_id = "s".into();
    let batch = [
        remove_message("s", "nope", 1),
        put_message("missing", "m", 2),
        mismatched,
    ];
    let err = Batch::prepare(&batch, false)
        .simulate(&stored(&[("s", 0)], &[]))
        .unwrap_err();
    assert_not_found(&err, "session");

    // Only a seq bump is left of a removal of something absent.
    let plan = Batch::prepare(&[remove_message("s", "nope", 8)], false)
        .simulate(&stored(&[("s", 3)], &[]))
        .unwrap();
    let ops = &plan.tenants[&tenant()];
    assert_eq!(ops.put_sessions[0].seq, 8);
    // A lower seq leaves the session alone; the (harmless) delete is all there is.
    let plan = Batch::prepare(&[remove_message("s", "nope", 2)], false)
        .simulate(&stored(&[("s", 3)], &[]))
        .unwrap();
    let ops = &plan.tenants[&tenant()];
    assert!(ops.put_sessions.is_empty(), "{plan:?}");
    assert_eq!(ops.delete_messages.len(), 1);
    // A removal in a session that does not exist does nothing at all.
    let plan = Batch::prepare(&[remove_message("s", "nope", 2)], false)
        .simulate(&stored(&[], &[]))
        .unwrap();
    assert!(plan.tenants.is_empty(), "{plan:?}");
}

#[test]
fn every_events_session_needs_its_fence_and_the_first_refused_event_decides() {
    let mut mismatched = put_session("other", 3);
    mismatched.session_id = "x".into();
    let batch = [
        put_session("s", 1).with_epoch(Some(10)),
        put_session("t", 2),
        mismatched,
    ];
    let b = Batch::prepare(&batch, false);
    let needs = b.needs();
    let fenced: Vec<_> = needs.fences[&tenant()]
        .iter()
        .map(SessionId::as_str)
        .collect();
    // The invalid event's session is looked up too: its fence is checked like any other.
    assert_eq!(fenced, ["s", "t", "x"]);
    assert!(!needs.sessions[&tenant()].contains(&SessionId::from("x")));

    let claim = |epoch| Claim {
        epoch,
        holder: "w".into(),
        expires_ms: 0,
    };
    let mut loaded = stored(&[], &[]);
    // Epoch 10 against a record at 9: numbers, not strings ("10" < "9").
    loaded
        .fences
        .entry(tenant())
        .or_default()
        .insert("s".into(), claim(9));
    let err = b.check_fences(&loaded).unwrap_err();
    assert!(
        matches!(&err, Error::Fenced { session, epoch: Some(10), current: 9, .. } if session == "s"),
        "{err}"
    );
    loaded
        .fences
        .get_mut(&tenant())
        .unwrap()
        .insert("s".into(), claim(10));
    b.check_fences(&loaded).unwrap();
    // A claimed session refuses an unfenced event.
    loaded
        .fences
        .get_mut(&tenant())
        .unwrap()
        .insert("x".into(), claim(1));
    let err = b.check_fences(&loaded).unwrap_err();
    assert!(
        matches!(&err, Error::Fenced { session, epoch: None, current: 1, .. } if session == "x"),
        "{err}"
    );
}

/// What one batch leaves of part `p` of session `s2`: the messages whose row of it the
/// plan writes, and those whose row it deletes (sorted).
fn where_p_ends(batch: &[Envelope<SyncEvent>], loaded: &Loaded) -> (Vec<String>, Vec<String>) {
    let plan = Batch::prepare(batch, false).simulate(loaded).unwrap();
    let ops = &plan.tenants[&tenant()];
    let put = ops
        .put_parts
        .iter()
        .filter(|r| r.id.as_str() == "p")
        .map(|r| r.message.as_str().to_owned())
        .collect();
    let mut deleted: Vec<String> = ops
        .delete_parts
        .iter()
        .filter(|(s, _, p)| s.as_str() == "s2" && p.as_str() == "p")
        .map(|(_, m, _)| m.as_str().to_owned())
        .collect();
    deleted.sort();
    (put, deleted)
}

/// Another session's changes in the same batch (its delete, a removal of a message of
/// the same id) do not make the plan forget where a part of this session moved earlier
/// in the batch: it moves on from there, and is left under one message only.
#[test]
fn a_part_moved_twice_around_another_sessions_changes_is_left_under_one_message() {
    let delete_s1 = env(
        3,
        SyncEvent::SessionDeleted {
            session_id: "s1".into(),
        },
    );
    // m1 → m2, then s1 deleted, or s1's message of the same id m2 removed, then m2 → m3:
    // the rows under m1 and m2 go.
    for (s1_message, between) in [("m1", delete_s1), ("m2", remove_message("s1", "m2", 3))] {
        let mut loaded = stored(
            &[("s1", 1), ("s2", 1)],
            &[("s1", s1_message), ("s2", "m1"), ("s2", "m2"), ("s2", "m3")],
        );
        loaded
            .part_messages
            .insert((tenant(), "s2".into(), "p".into()), vec!["m1".into()]);
        let batch = [
            put_part("s2", "m2", "p", 2),
            between,
            put_part("s2", "m3", "p", 4),
        ];
        assert_eq!(
            where_p_ends(&batch, &loaded),
            (
                vec!["m3".to_owned()],
                vec!["m1".to_owned(), "m2".to_owned()]
            ),
            "with s1's message {s1_message}"
        );
    }
}
