//! Search checks shared by both dialects: the index against `forge_core::search::scan`
//! on the same store (the reference reads every row), over the differential fixtures'
//! random batches and a hand-written history of overwrites, moves, removals and
//! deletions in two tenants.

use std::collections::BTreeSet;

use forge_core::search::{scan, SearchHit, SearchQuery, MAX_SEARCH_LIMIT};
use forge_core::{Envelope, MessageId, Part, PartId, SessionId, Store, SyncEvent, TenantId};
use proptest::test_runner::TestCaseError;
use serde_json::json;

use super::{env, put_message, put_session, tenant, SESSIONS, TENANTS};

/// A hit's place: session, message, part.
pub type Place = (SessionId, MessageId, PartId);

fn place(h: &SearchHit) -> Place {
    (
        h.session_id.clone(),
        h.message_id.clone(),
        h.part_id.clone(),
    )
}

fn places(hits: &[SearchHit]) -> BTreeSet<Place> {
    hits.iter().map(place).collect()
}

/// Queries over the words of the differential fixtures' parts (`done 8`, `stream`,
/// `typed by the user`, `hm`, tool `bash` with input `ls` and output `a b`), some
/// matching nothing.
pub const QUERIES: &[&str] = &[
    "done",
    "stream",
    "typed user",
    "USER, by",
    "hm",
    "bash",
    "bash ls",
    "ls: a",
    "b",
    "a b",
    "done 8",
    "16",
    "nothing",
    "bas",
];

/// The store's search and the scan find the same places for `query` (unlimited), and
/// with small limits the store returns as many as match, the best of them.
pub async fn assert_same_as_scan(
    store: &dyn Store,
    tenant: &TenantId,
    query: &SearchQuery,
) -> Result<(), String> {
    let mut all = query.clone();
    all.limit = MAX_SEARCH_LIMIT;
    let got = store
        .search(tenant, &all)
        .await
        .map_err(|e| e.to_string())?;
    let want = scan(store, tenant, &all).await.map_err(|e| e.to_string())?;
    let (g, w) = (places(&got), places(&want));
    if g != w || got.len() != g.len() {
        return Err(format!(
            "tenant {tenant}, {:?} in session {:?}: the index found {g:?}, the scan {w:?}",
            query.text, query.session
        ));
    }
    if got.windows(2).any(|p| p[1].score > p[0].score) {
        return Err(format!("{:?}: scores rise down the list", query.text));
    }
    for limit in [1, 2] {
        let mut few = query.clone();
        few.limit = limit;
        let some = store
            .search(tenant, &few)
            .await
            .map_err(|e| e.to_string())?;
        let floor = some.iter().map(|h| h.score).fold(f64::INFINITY, f64::min);
        let kept = places(&some);
        let better = got
            .iter()
            .find(|h| h.score > floor + 1e-9 && !kept.contains(&place(h)));
        if some.len() != limit.min(got.len()) || !kept.is_subset(&g) || better.is_some() {
            return Err(format!(
                "{:?} with limit {limit}: {some:?}; unlimited: {got:?}",
                query.text
            ));
        }
    }
    Ok(())
}

/// [`assert_same_as_scan`] for every query of [`QUERIES`], in both tenants, over the
/// whole tenant and each session.
pub async fn assert_index_is_the_scan(store: &dyn Store) -> Result<(), TestCaseError> {
    for t in TENANTS {
        let t = tenant(t);
        for text in QUERIES {
            let sessions = std::iter::once(None).chain(SESSIONS.iter().map(|s| Some(*s)));
            for session in sessions {
                let mut query = SearchQuery::new(*text);
                query.session = session.map(SessionId::from);
                assert_same_as_scan(store, &t, &query)
                    .await
                    .map_err(TestCaseError::fail)?;
            }
        }
    }
    Ok(())
}

/// A text part of `text`.
pub fn text_part(s: &str, m: &str, p: &str, text: &str) -> Part {
    serde_json::from_value(json!({
        "id": p, "sessionID": s, "messageID": m, "type": "text", "text": text,
        "time": {"start": 1, "end": 2},
    }))
    .unwrap()
}

/// A completed tool call.
pub fn tool_part(s: &str, m: &str, p: &str, command: &str, output: &str) -> Part {
    serde_json::from_value(json!({
        "id": p, "sessionID": s, "messageID": m, "type": "tool", "callID": "c", "tool": "shell",
        "state": {"status": "completed", "input": {"command": command}, "output": output,
                  "title": "t", "metadata": {}, "time": {"start": 1, "end": 2}},
    }))
    .unwrap()
}

fn put(t: &str, part: Part, seq: u64) -> Envelope<SyncEvent> {
    let session = part.session_id.clone();
    env(t, session.as_ref(), seq, SyncEvent::PartUpdated { part })
}

/// A history in tenants `a` and `b` whose words tell where a part must (not) be found:
/// punctuation, case, accents and Greek, a tool's input and output, an overwrite, a
/// move, a part removed, a message removed, a session deleted, the same ids in both
/// tenants.
pub fn history() -> Vec<Vec<Envelope<SyncEvent>>> {
    vec![
        vec![
            put_session("a", "ses_1", 1),
            put_message("a", "ses_1", "msg_1", 0, 2),
            put_message("a", "ses_1", "msg_2", 0, 3),
            put(
                "a",
                text_part(
                    "ses_1",
                    "msg_1",
                    "prt_1",
                    "Fix src/main.rs: E0308 — ÉTÉ ΟΔΟΣ",
                ),
                4,
            ),
            put(
                "a",
                tool_part(
                    "ses_1",
                    "msg_1",
                    "prt_2",
                    "cargo build --release",
                    "error: mismatched types",
                ),
                5,
            ),
            put(
                "a",
                text_part("ses_1", "msg_2", "prt_3", "overwritten soon: walrus"),
                6,
            ),
            put(
                "a",
                text_part("ses_1", "msg_2", "prt_4", "moved later: heron"),
                7,
            ),
            put(
                "a",
                text_part("ses_1", "msg_2", "prt_5", "removed later: otter"),
                8,
            ),
        ],
        vec![
            put_session("a", "ses_2", 1),
            put_message("a", "ses_2", "msg_1", 0, 2),
            put(
                "a",
                text_part(
                    "ses_2",
                    "msg_1",
                    "prt_1",
                    "in a message removed later: badger error",
                ),
                3,
            ),
            put_session("a", "ses_3", 1),
            put_message("a", "ses_3", "msg_1", 0, 2),
            put(
                "a",
                text_part(
                    "ses_3",
                    "msg_1",
                    "prt_1",
                    "in a session deleted later: lynx error",
                ),
                3,
            ),
            put_session("b", "ses_1", 1),
            put_message("b", "ses_1", "msg_1", 0, 2),
            put(
                "b",
                text_part(
                    "ses_1",
                    "msg_1",
                    "prt_1",
                    "the other tenant: error walrus heron",
                ),
                3,
            ),
        ],
        vec![
            put("a", text_part("ses_1", "msg_2", "prt_3", "now a puffin"), 9),
            put(
                "a",
                text_part("ses_1", "msg_1", "prt_4", "moved later: heron"),
                10,
            ),
            env(
                "a",
                "ses_1",
                11,
                SyncEvent::PartRemoved {
                    session_id: "ses_1".into(),
                    message_id: "msg_2".into(),
                    part_id: "prt_5".into(),
                },
            ),
            env(
                "a",
                "ses_2",
                4,
                SyncEvent::MessageRemoved {
                    session_id: "ses_2".into(),
                    message_id: "msg_1".into(),
                },
            ),
            env(
                "a",
                "ses_3",
                4,
                SyncEvent::SessionDeleted {
                    session_id: "ses_3".into(),
                },
            ),
        ],
    ]
}

/// The places of `store`'s hits for `text` in tenant `t` (session `s` when given).
pub async fn found(store: &dyn Store, t: &str, s: Option<&str>, text: &str) -> Vec<String> {
    let mut query = SearchQuery::new(text);
    query.session = s.map(SessionId::from);
    let mut out: Vec<String> = store
        .search(&tenant(t), &query)
        .await
        .unwrap()
        .iter()
        .map(|h| format!("{}/{}/{}", h.session_id, h.message_id, h.part_id))
        .collect();
    out.sort();
    out
}

/// After [`history`], each word is found exactly where it is now.
pub async fn assert_history_found(store: &dyn Store) {
    for (t, s, text, want) in [
        ("a", None, "main", &["ses_1/msg_1/prt_1"][..]),
        ("a", None, "E0308 src", &["ses_1/msg_1/prt_1"]),
        ("a", None, "été", &["ses_1/msg_1/prt_1"]),
        ("a", None, "ΟΔΟΣ", &["ses_1/msg_1/prt_1"]),
        ("a", None, "οδος fix", &["ses_1/msg_1/prt_1"]),
        ("a", None, "ain", &[]),
        ("a", None, "cargo release", &["ses_1/msg_1/prt_2"]),
        ("a", None, "mismatched", &["ses_1/msg_1/prt_2"]),
        ("a", None, "shell", &["ses_1/msg_1/prt_2"]),
        ("a", None, "walrus", &[]),
        ("a", None, "puffin", &["ses_1/msg_2/prt_3"]),
        ("a", None, "heron", &["ses_1/msg_1/prt_4"]),
        ("a", None, "otter", &[]),
        ("a", None, "badger", &[]),
        ("a", None, "lynx", &[]),
        ("a", None, "error", &["ses_1/msg_1/prt_2"]),
        ("a", Some("ses_2"), "error", &[]),
        ("a", Some("ses_1"), "heron moved", &["ses_1/msg_1/prt_4"]),
        ("b", None, "walrus heron", &["ses_1/msg_1/prt_1"]),
        ("b", None, "puffin", &[]),
        ("b", None, "error", &["ses_1/msg_1/prt_1"]),
    ] {
        let got = found(store, t, s, text).await;
        assert_eq!(got, want, "tenant {t}, session {s:?}: {text:?}");
    }
    for text in ["main", "error", "heron", "walrus"] {
        for t in ["a", "b"] {
            assert_same_as_scan(store, &tenant(t), &SearchQuery::new(text))
                .await
                .unwrap();
        }
    }
}
