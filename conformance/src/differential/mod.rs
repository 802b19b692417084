//! Differential testing against `MemoryStore`, for backend authors.
//!
//! The conformance properties compare a backend with a reference model; this module
//! compares it with `MemoryStore` read by read: id pools with tricky prefixes (ids that
//! are prefixes of each other, end in NUL, or start with the largest char, so a prefix
//! scan that overshoots or stops short shows), row builders, every read of both stores
//! compared ([`assert_same_reads`]), a sample history, and [`random`] batches of
//! upserts and removes whose outcomes and reads must agree after every batch.

#![allow(missing_docs, clippy::missing_panics_doc)]

pub mod damage;
pub mod random;

use forge_core::{
    Cursor, Envelope, Error, MemoryStore, Message, MessageId, Page, Part, Session, SessionId,
    Store, SyncEvent, TenantId,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::json;

// ---------------------------------------------------------------------------------------
// Fixtures

/// Tenants, sessions, messages and parts drawn from small pools so ids repeat. The pools
/// hold ids that are prefixes of each other, ids that end in NUL (the exact successor
/// of another id) and ids that start with the largest char (above any "maximal"
/// sentinel string), so any prefix scan that overshoots or stops short shows.
pub const TENANTS: &[&str] = &["a", "b"];
pub const SESSIONS: &[&str] = &["ses_1", "ses_10", "ses_1\0", "ses_2", "\u{10FFFF}ses"];
pub const MESSAGES: &[&str] = &[
    "msg_1",
    "msg_10",
    "msg_2",
    "msg_2\0x",
    "msg_3",
    "msg_4",
    "\u{10FFFF}\u{10FFFF}msg",
];
pub const PARTS: &[&str] = &["prt_1", "prt_10", "prt_2"];

pub fn tenant(name: &str) -> TenantId {
    TenantId::new(name).unwrap()
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

pub fn session(id: &str, variant: u8) -> Session {
    let mut v = json!({
        "id": id,
        "title": format!("title {variant}"),
        "time": {"created": 1, "updated": i64::from(variant)},
        "projectID": "proj",
    });
    if variant % 2 == 1 {
        v["parentID"] = json!("ses_parent");
    }
    serde_json::from_value(v).unwrap()
}

pub fn message(session: &str, id: &str, variant: u8) -> Message {
    let v = match variant % 4 {
        0 => json!({
            "id": id, "sessionID": session, "role": "user",
            "time": {"created": 1}, "agent": "build",
            "model": {"providerID": "p", "modelID": "m"},
        }),
        // An open assistant answer (no `time.completed`), with an unknown field.
        1 => json!({
            "id": id, "sessionID": session, "role": "assistant",
            "time": {"created": 2}, "parentID": "msg_1", "modelID": "m", "providerID": "p",
            "cost": 0.25, "tokens": {"input": 3, "output": 4, "reasoning": 0,
            "cache": {"read": 1, "write": 0}}, "mode": "build",
        }),
        2 => json!({
            "id": id, "sessionID": session, "role": "assistant",
            "time": {"created": 2, "completed": 3}, "parentID": "msg_1", "modelID": "m",
            "providerID": "p", "cost": 1.5, "finish": "stop", "summary": true,
        }),
        _ => json!({
            "id": id, "sessionID": session, "role": "system-v9",
            "content": {"nested": [1, {"x": null}]},
        }),
    };
    serde_json::from_value(v).unwrap()
}

pub fn part(session: &str, message: &str, id: &str, variant: u8) -> Part {
    let mut v = match variant % 8 {
        0 => json!({"type": "text", "text": format!("done {variant}"),
                    "time": {"start": 1, "end": 2}}),
        1 => json!({"type": "text", "text": "stream", "time": {"start": 1}}),
        2 => json!({"type": "text", "text": "typed by the user", "synthetic": false}),
        3 => json!({"type": "reasoning", "text": "hm", "time": {"start": 1},
                    "metadata": {"sig": "x"}}),
        4 => json!({"type": "tool", "callID": "c1", "tool": "bash",
                    "state": {"status": "pending", "input": {}, "raw": "{\"cm"}}),
        5 => json!({"type": "tool", "callID": "c1", "tool": "bash",
                    "state": {"status": "running", "input": {"cmd": "ls"},
                              "time": {"start": 1}}}),
        6 => json!({"type": "tool", "callID": "c1", "tool": "bash",
                    "state": {"status": "completed", "input": {"cmd": "ls"}, "output": "a\nb",
                              "title": "ls", "metadata": {"exit": 0},
                              "time": {"start": 1, "end": 2}}}),
        _ => json!({"type": "future-kind", "payload": {"a": [1, 2.5, {"b": null}]}}),
    };
    v["id"] = json!(id);
    v["sessionID"] = json!(session);
    v["messageID"] = json!(message);
    serde_json::from_value(v).unwrap()
}

pub fn env(tenant_name: &str, session_id: &str, seq: u64, event: SyncEvent) -> Envelope<SyncEvent> {
    Envelope {
        tenant: tenant(tenant_name),
        session_id: session_id.into(),
        seq,
        epoch: None,
        event,
    }
}

pub fn put_session(t: &str, s: &str, seq: u64) -> Envelope<SyncEvent> {
    env(
        t,
        s,
        seq,
        SyncEvent::SessionUpdated {
            info: session(s, 0),
        },
    )
}

pub fn put_message(t: &str, s: &str, m: &str, variant: u8, seq: u64) -> Envelope<SyncEvent> {
    env(
        t,
        s,
        seq,
        SyncEvent::MessageUpdated {
            info: message(s, m, variant),
        },
    )
}

pub fn put_part(t: &str, s: &str, m: &str, p: &str, variant: u8, seq: u64) -> Envelope<SyncEvent> {
    env(
        t,
        s,
        seq,
        SyncEvent::PartUpdated {
            part: part(s, m, p, variant),
        },
    )
}

/// The error as the caller sees it: kind and message.
pub fn outcome(r: &forge_core::Result<()>) -> String {
    match r {
        Ok(()) => "ok".into(),
        Err(e) => {
            let kind = e.kind();
            format!("{kind}: {e}")
        }
    }
}

pub async fn all_pages(
    store: &dyn Store,
    t: &TenantId,
    s: &SessionId,
    limit: usize,
) -> forge_core::Result<Vec<Page>> {
    let mut pages = Vec::new();
    let mut cursor: Option<Cursor> = None;
    loop {
        let page = store.messages(t, s, cursor.as_ref(), limit).await?;
        cursor.clone_from(&page.next);
        pages.push(page);
        if cursor.is_none() {
            return Ok(pages);
        }
        assert!(pages.len() <= 1000, "paging does not end");
    }
}

pub fn fail(e: &Error) -> TestCaseError {
    TestCaseError::fail(format!("read failed: {e}"))
}

/// Both reads succeed and are equal.
macro_rules! same {
    ($mem:expr, $db:expr $(, $fmt:literal $(, $arg:expr)*)?) => {
        prop_assert_eq!($mem.await.map_err(|e| fail(&e))?, $db.await.map_err(|e| fail(&e))? $(, $fmt $(, $arg)*)?)
    };
}

/// Every read of both stores, for every tenant and session of the pools.
pub async fn assert_same_reads(mem: &MemoryStore, db: &dyn Store) -> Result<(), TestCaseError> {
    for t in TENANTS.iter().map(|t| tenant(t)) {
        same!(mem.sessions(&t), db.sessions(&t));
        same!(mem.open_items(&t, None), db.open_items(&t, None));
        for s in SESSIONS.iter().map(|s| SessionId::from(*s)) {
            same!(mem.session(&t, &s), db.session(&t, &s));
            same!(mem.open_items(&t, Some(&s)), db.open_items(&t, Some(&s)));
            for m in MESSAGES.iter().map(|m| MessageId::from(*m)) {
                same!(mem.message(&t, &s, &m), db.message(&t, &s, &m));
                let before = Cursor::before(m.clone());
                same!(
                    mem.messages(&t, &s, Some(&before), 2),
                    db.messages(&t, &s, Some(&before), 2)
                );
            }
            for limit in [0, 1, 3, 5000] {
                same!(
                    all_pages(mem, &t, &s, limit),
                    all_pages(db, &t, &s, limit),
                    "limit {}",
                    limit
                );
            }
        }
    }
    Ok(())
}

/// Cases per property test: `FORGE_PROPTEST_CASES`, else `default`.
pub fn proptest_cases(default: u32) -> u32 {
    std::env::var("FORGE_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

// ---------------------------------------------------------------------------------------
// Fixtures for the scenario tests

/// A small history over both tenants: nested parts, an open assistant message, an
/// overwrite, a removed message and a deleted session.
pub fn sample_history() -> Vec<Vec<Envelope<SyncEvent>>> {
    vec![
        vec![
            put_session("a", "ses_1", 1),
            put_message("a", "ses_1", "msg_1", 0, 2),
            put_part("a", "ses_1", "msg_1", "prt_1", 2, 3),
        ],
        vec![
            put_message("a", "ses_1", "msg_2", 1, 4),
            put_part("a", "ses_1", "msg_2", "prt_1", 1, 5),
            put_part("a", "ses_1", "msg_2", "prt_2", 5, 6),
            put_part("a", "ses_1", "msg_2", "prt_10", 7, 7),
        ],
        vec![
            put_session("b", "ses_1", 3),
            put_message("b", "ses_1", "msg_1", 2, 4),
            put_part("b", "ses_1", "msg_1", "prt_1", 6, 5),
        ],
        vec![
            put_session("a", "ses_10", 1),
            put_message("a", "ses_10", "msg_3", 1, 2),
            put_message("a", "ses_1", "msg_3", 2, 8),
            put_message("a", "ses_1", "msg_4", 3, 9),
            env(
                "a",
                "ses_1",
                10,
                SyncEvent::MessageRemoved {
                    session_id: "ses_1".into(),
                    message_id: "msg_4".into(),
                },
            ),
        ],
        vec![
            put_session("b", "ses_2", 1),
            put_message("b", "ses_2", "msg_1", 1, 2),
            env(
                "b",
                "ses_2",
                3,
                SyncEvent::SessionDeleted {
                    session_id: "ses_2".into(),
                },
            ),
        ],
    ]
}

pub async fn apply_all(store: &dyn Store, batches: &[Vec<Envelope<SyncEvent>>]) {
    for batch in batches {
        store.apply(batch).await.unwrap();
    }
}

pub async fn reference(batches: &[Vec<Envelope<SyncEvent>>]) -> MemoryStore {
    let mem = MemoryStore::new();
    apply_all(&mem, batches).await;
    mem
}

pub async fn assert_matches_reference(db: &dyn Store, batches: &[Vec<Envelope<SyncEvent>>]) {
    let mem = reference(batches).await;
    assert_same_reads(&mem, db).await.unwrap();
    // The fixture is not vacuous.
    assert_eq!(db.sessions(&tenant("a")).await.unwrap().len(), 2);
    assert_eq!(
        db.message(&tenant("a"), &"ses_1".into(), &"msg_2".into())
            .await
            .unwrap()
            .unwrap()
            .parts
            .len(),
        3
    );
}

// ---------------------------------------------------------------------------------------
// Exact values

/// Batches that must fail as a whole, each with the error kind it must fail with, to
/// apply after [`atomicity_base`]: a missing message after writes to two tenants, a part
/// for a message removed earlier in the batch, an event in another session's envelope.
pub fn failing_batches() -> Vec<(Vec<Envelope<SyncEvent>>, &'static str)> {
    vec![
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
    ]
}

/// The history [`failing_batches`] are applied on top of.
pub fn atomicity_base() -> Vec<Vec<Envelope<SyncEvent>>> {
    vec![vec![
        put_session("a", "ses_1", 1),
        put_message("a", "ses_1", "msg_1", 1, 2),
        put_part("a", "ses_1", "msg_1", "prt_1", 1, 3),
        put_session("b", "ses_2", 1),
    ]]
}
