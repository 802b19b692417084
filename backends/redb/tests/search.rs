//! The search index: `RedbStore::search` answers as `forge_core::search::scan` does on
//! the same rows, after random upserts, overwrites, moves, removals and deleted
//! sessions, in two tenants, over the tenant or one session, with limits; a version 5
//! file gets its index built on open; `search=off` keeps none and refuses to search, and
//! `search=on` builds it again.

mod common;

use common::*;
use forge_core::{Envelope, Error, SearchKind, SearchQuery, Store, SyncEvent, TenantId};
use forge_redb::{Durability, RedbOptions, RedbStore};
use forge_testkit::logs::Recorder;
use proptest::prelude::*;
use serde_json::json;

fn fast() -> RedbOptions {
    RedbOptions {
        durability: Durability::None,
        ..RedbOptions::default()
    }
}

fn query(text: &str, session: Option<&str>, limit: usize) -> SearchQuery {
    SearchQuery {
        text: text.to_owned(),
        limit,
        session: session.map(Into::into),
    }
}

/// Checks every query of `texts` in tenants `a` and `b`, over the tenant and within
/// each of `sessions`.
async fn check_all(store: &RedbStore, texts: &[&str], sessions: &[&str]) -> Result<(), String> {
    for t in ["a", "b"] {
        let t = tenant(t);
        for text in texts {
            check_search(store, &t, &query(text, None, 200)).await?;
            for s in sessions {
                check_search(store, &t, &query(text, Some(s), 200)).await?;
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Random histories: the differential fixtures, and documents of many words

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases(24)))]

    #[test]
    fn random_batches_keep_the_index_equal_to_the_scan(batches in differential::batches()) {
        let rt = runtime();
        let (_dir, store) = temp_store(fast());
        let mut texts: Vec<&str> = FIXTURE_WORDS.to_vec();
        texts.extend(["typed user", "bash ls a", "done 7"]);
        rt.block_on(async {
            for batch in &batches {
                let batch: Vec<_> = batch.iter().flat_map(differential::to_envelopes).collect();
                // Failing batches too: they must leave the index as they leave the rows.
                let _ = store.apply(&batch).await;
                check_all(&store, &texts, &SESSIONS[..2]).await.map_err(TestCaseError::fail)?;
            }
            Ok::<_, TestCaseError>(())
        })?;
    }
}

const VOCABULARY: &[&str] = &[
    "alpha",
    "Beta",
    "gamma",
    "needle",
    "the",
    "a",
    "x1",
    "42",
    "été",
    "ÉTÉ",
    "snake_case",
    "src/main.rs",
];

const SEARCHED: &[&str] = &[
    "alpha",
    "beta",
    "gamma",
    "needle",
    "the",
    "a",
    "x1",
    "42",
    "été",
    "snake",
    "rs",
    "bash",
    "grep",
    "missing",
    "alpha beta",
    "the needle a",
    "ÉTÉ, 42!",
    "gamma gamma x1",
];

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec((0..VOCABULARY.len(), 0..4usize), 0..10).prop_map(|words| {
        let mut out = String::new();
        for &(w, sep) in &words {
            out.push_str(VOCABULARY[w]);
            out.push_str([" ", ", ", "\n  ", "-"][sep]);
        }
        out
    })
}

/// A part of each kind a document comes from, and kinds it does not.
fn body() -> impl Strategy<Value = serde_json::Value> {
    let blob = format!("{}{}", forge_core::blob::BLOB_PREFIX, "0".repeat(64));
    prop_oneof![
        3 => text().prop_map(|t| json!({"type": "text", "text": t})),
        2 => text().prop_map(|t| json!({"type": "reasoning", "text": t, "time": {"start": 1}})),
        1 => text().prop_map(|t| json!({"type": "tool", "callID": "c", "tool": "bash",
            "state": {"status": "pending", "input": {}, "raw": t}})),
        2 => (text(), text()).prop_map(|(i, o)| json!({"type": "tool", "callID": "c",
            "tool": "grep", "state": {"status": "completed",
            "input": {"pattern": i, "n": 42, "deep": [true, null]}, "output": o,
            "title": "t", "metadata": {}, "time": {"start": 1, "end": 2}}})),
        1 => (text(), text()).prop_map(|(i, e)| json!({"type": "tool", "callID": "c",
            "tool": "bash", "state": {"status": "error", "input": {"cmd": i}, "error": e,
            "time": {"start": 1, "end": 2}}})),
        1 => text().prop_map(move |i| json!({"type": "tool", "callID": "c", "tool": "bash",
            "state": {"status": "completed", "input": {"cmd": i}, "output": blob.clone(),
            "title": "t", "metadata": {}, "time": {"start": 1, "end": 2}}})),
        1 => text().prop_map(|t| json!({"type": "future-kind", "payload": t})),
    ]
}

#[derive(Clone, Debug)]
enum Step {
    Put(usize, usize, usize, usize, serde_json::Value),
    RemovePart(usize, usize, usize, usize),
    RemoveMessage(usize, usize, usize),
    DeleteSession(usize, usize),
}

const T: &[&str] = &["a", "b"];
const S: &[&str] = &["ses_1", "ses_2", "ses_3"];
const M: &[&str] = &["msg_1", "msg_2", "msg_3"];
const P: &[&str] = &["prt_1", "prt_2", "prt_3", "prt_4"];

fn step() -> impl Strategy<Value = Step> {
    let at = (0..T.len(), 0..S.len(), 0..M.len(), 0..P.len());
    prop_oneof![
        8 => (at.clone(), body()).prop_map(|((t, s, m, p), b)| Step::Put(t, s, m, p, b)),
        2 => at.clone().prop_map(|(t, s, m, p)| Step::RemovePart(t, s, m, p)),
        1 => at.clone().prop_map(|(t, s, m, _)| Step::RemoveMessage(t, s, m)),
        1 => at.prop_map(|(t, s, _, _)| Step::DeleteSession(t, s)),
    ]
}

fn envelopes(step: &Step, seq: u64) -> Vec<Envelope<SyncEvent>> {
    match step {
        Step::Put(t, s, m, p, body) => {
            let (t, s, m, p) = (T[*t], S[*s], M[*m], P[*p]);
            let mut v = body.clone();
            v["id"] = json!(p);
            v["sessionID"] = json!(s);
            v["messageID"] = json!(m);
            let part = serde_json::from_value(v).unwrap();
            vec![
                put_session(t, s, seq),
                put_message(t, s, m, 0, seq),
                env(t, s, seq, SyncEvent::PartUpdated { part }),
            ]
        }
        Step::RemovePart(t, s, m, p) => vec![env(
            T[*t],
            S[*s],
            seq,
            SyncEvent::PartRemoved {
                session_id: S[*s].into(),
                message_id: M[*m].into(),
                part_id: P[*p].into(),
            },
        )],
        Step::RemoveMessage(t, s, m) => vec![env(
            T[*t],
            S[*s],
            seq,
            SyncEvent::MessageRemoved {
                session_id: S[*s].into(),
                message_id: M[*m].into(),
            },
        )],
        Step::DeleteSession(t, s) => vec![env(
            T[*t],
            S[*s],
            seq,
            SyncEvent::SessionDeleted {
                session_id: S[*s].into(),
            },
        )],
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases(24)))]

    #[test]
    fn documents_of_many_words_keep_the_index_equal_to_the_scan(
        batches in prop::collection::vec(prop::collection::vec(step(), 1..5), 1..14)
    ) {
        let rt = runtime();
        let (_dir, store) = temp_store(fast());
        rt.block_on(async {
            for (i, batch) in batches.iter().enumerate() {
                let batch: Vec<_> = batch.iter().flat_map(|s| envelopes(s, i as u64)).collect();
                store.apply(&batch).await.map_err(|e| TestCaseError::fail(e.to_string()))?;
                check_all(&store, SEARCHED, &S[..2]).await.map_err(TestCaseError::fail)?;
            }
            // A limit keeps the best: the first hits of the unlimited answer, by score.
            for t in T {
                for text in SEARCHED {
                    let all = store.search(&tenant(t), &query(text, None, 200)).await.unwrap();
                    for limit in [1, 2, 5] {
                        let some = store.search(&tenant(t), &query(text, None, limit)).await.unwrap();
                        let scores = |h: &[forge_core::SearchHit]| -> Vec<f64> {
                            h.iter().map(|h| h.score).collect()
                        };
                        prop_assert_eq!(
                            scores(&some),
                            scores(&all[..all.len().min(limit)]),
                            "{} {:?} limit {}", t, text, limit
                        );
                    }
                }
            }
            Ok::<_, TestCaseError>(())
        })?;
    }
}

// ---------------------------------------------------------------------------------------
// Each way a part leaves, named

fn text_part(s: &str, m: &str, p: &str, text: &str, seq: u64) -> Envelope<SyncEvent> {
    let part = serde_json::from_value(json!({
        "type": "text", "text": text, "id": p, "sessionID": s, "messageID": m,
    }))
    .unwrap();
    env("a", s, seq, SyncEvent::PartUpdated { part })
}

async fn found(store: &RedbStore, text: &str) -> Vec<(String, String, String)> {
    let hits = store
        .search(&tenant("a"), &SearchQuery::new(text))
        .await
        .unwrap();
    check_search(store, &tenant("a"), &SearchQuery::new(text))
        .await
        .unwrap();
    hits.into_iter()
        .map(|h| {
            (
                h.session_id.to_string(),
                h.message_id.to_string(),
                h.part_id.to_string(),
            )
        })
        .collect()
}

fn at(s: &str, m: &str, p: &str) -> (String, String, String) {
    (s.to_owned(), m.to_owned(), p.to_owned())
}

#[test]
fn overwrites_moves_and_removals_keep_the_index_exact() {
    let rt = runtime();
    let (_dir, store) = temp_store(RedbOptions::default());
    rt.block_on(async {
        let mut seq = 0;
        let mut next = || {
            seq += 1;
            seq
        };
        for s in ["ses_1", "ses_2"] {
            store.apply(&[put_session("a", s, next())]).await.unwrap();
            for m in ["msg_1", "msg_2"] {
                store
                    .apply(&[put_message("a", s, m, 0, next())])
                    .await
                    .unwrap();
            }
        }
        store
            .apply(&[
                text_part("ses_1", "msg_1", "prt_1", "the old needle", next()),
                text_part("ses_1", "msg_1", "prt_2", "a needle too", next()),
                text_part("ses_2", "msg_1", "prt_3", "needle in session two", next()),
            ])
            .await
            .unwrap();
        assert_eq!(found(&store, "needle").await.len(), 3);

        // An overwrite: found by its new text only.
        store
            .apply(&[text_part(
                "ses_1",
                "msg_1",
                "prt_1",
                "the new thread",
                next(),
            )])
            .await
            .unwrap();
        assert_eq!(found(&store, "old").await, vec![]);
        assert_eq!(
            found(&store, "thread").await,
            vec![at("ses_1", "msg_1", "prt_1")]
        );

        // A move to another message of the session: found there.
        store
            .apply(&[text_part(
                "ses_1",
                "msg_2",
                "prt_1",
                "the new thread",
                next(),
            )])
            .await
            .unwrap();
        assert_eq!(
            found(&store, "thread").await,
            vec![at("ses_1", "msg_2", "prt_1")]
        );

        // A part removed under a message that does not hold it: nothing changes.
        let remove = |m: &str, p: &str, seq| {
            env(
                "a",
                "ses_1",
                seq,
                SyncEvent::PartRemoved {
                    session_id: "ses_1".into(),
                    message_id: m.into(),
                    part_id: p.into(),
                },
            )
        };
        store
            .apply(&[remove("msg_1", "prt_1", next())])
            .await
            .unwrap();
        assert_eq!(found(&store, "thread").await.len(), 1);
        store
            .apply(&[remove("msg_2", "prt_1", next())])
            .await
            .unwrap();
        assert_eq!(found(&store, "thread").await, vec![]);

        // A message removed with its parts.
        store
            .apply(&[env(
                "a",
                "ses_1",
                next(),
                SyncEvent::MessageRemoved {
                    session_id: "ses_1".into(),
                    message_id: "msg_1".into(),
                },
            )])
            .await
            .unwrap();
        assert_eq!(
            found(&store, "needle").await,
            vec![at("ses_2", "msg_1", "prt_3")]
        );

        // A part that stops being searched (a file in place of text) leaves the index.
        let file = serde_json::from_value(json!({
            "type": "future-kind", "payload": "needle", "id": "prt_3",
            "sessionID": "ses_2", "messageID": "msg_1",
        }))
        .unwrap();
        store
            .apply(&[env(
                "a",
                "ses_2",
                next(),
                SyncEvent::PartUpdated { part: file },
            )])
            .await
            .unwrap();
        assert_eq!(found(&store, "needle").await, vec![]);

        // A deleted session takes its parts, and a new session of the same id starts
        // with none of them.
        store
            .apply(&[text_part("ses_2", "msg_2", "prt_4", "needle again", next())])
            .await
            .unwrap();
        assert_eq!(found(&store, "needle").await.len(), 1);
        store
            .apply(&[
                env(
                    "a",
                    "ses_2",
                    next(),
                    SyncEvent::SessionDeleted {
                        session_id: "ses_2".into(),
                    },
                ),
                put_session("a", "ses_2", next()),
                put_message("a", "ses_2", "msg_2", 0, next()),
            ])
            .await
            .unwrap();
        assert_eq!(found(&store, "needle").await, vec![]);
        store
            .apply(&[text_part("ses_2", "msg_2", "prt_5", "needle anew", next())])
            .await
            .unwrap();
        assert_eq!(
            found(&store, "needle").await,
            vec![at("ses_2", "msg_2", "prt_5")]
        );

        // Another tenant never sees it; a query without words is refused.
        let b = TenantId::new("b").unwrap();
        assert!(store
            .search(&b, &SearchQuery::new("needle"))
            .await
            .unwrap()
            .is_empty());
        let err = store
            .search(&tenant("a"), &SearchQuery::new("--"))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    });
}

/// Enough documents that a word's postings span many blocks, written to five sessions
/// in turn (so postings land in the middle of a word's blocks, not only at the end),
/// then overwritten, removed, a message removed and a session deleted.
#[test]
fn postings_over_many_blocks_answer_as_the_scan() {
    const N: usize = 1_500;
    let rt = runtime();
    let (_dir, store) = temp_store(fast());
    let sessions = ["ses_a", "ses_b", "ses_c", "ses_d", "ses_e"];
    let text = |i: usize, v: usize| {
        let mut t = format!("common w{} x{} v{v}", i % 7, i % 13);
        if i.is_multiple_of(97) {
            t.push_str(" rare");
        }
        t
    };
    let put = |i: usize, v: usize| {
        let s = sessions[i % sessions.len()];
        let m = if i.is_multiple_of(2) {
            "msg_1"
        } else {
            "msg_2"
        };
        let part = serde_json::from_value(json!({
            "type": "text", "text": text(i, v), "id": format!("prt_{i:05}"),
            "sessionID": s, "messageID": m,
        }))
        .unwrap();
        env("a", s, 1, SyncEvent::PartUpdated { part })
    };
    rt.block_on(async {
        for s in sessions {
            store
                .apply(&[
                    put_session("a", s, 1),
                    put_message("a", s, "msg_1", 0, 1),
                    put_message("a", s, "msg_2", 0, 1),
                ])
                .await
                .unwrap();
        }
        let all: Vec<_> = (0..N).map(|i| put(i, 0)).collect();
        for batch in all.chunks(40) {
            store.apply(batch).await.unwrap();
        }
        let texts = [
            "common",
            "w3",
            "w3 x5",
            "rare",
            "common rare",
            "x1 w2 common",
            "v1",
            "v0 w6",
        ];
        check_all(&store, &texts, &sessions).await.unwrap();
        // Overwritten (other words), removed, a message and a session gone.
        let changed: Vec<_> = (0..N).step_by(17).map(|i| put(i, 1)).collect();
        store.apply(&changed).await.unwrap();
        let removed: Vec<_> = (0..N)
            .step_by(11)
            .map(|i| {
                let s = sessions[i % sessions.len()];
                let m = if i.is_multiple_of(2) {
                    "msg_1"
                } else {
                    "msg_2"
                };
                env(
                    "a",
                    s,
                    2,
                    SyncEvent::PartRemoved {
                        session_id: s.into(),
                        message_id: m.into(),
                        part_id: format!("prt_{i:05}").into(),
                    },
                )
            })
            .collect();
        store.apply(&removed).await.unwrap();
        check_all(&store, &texts, &sessions).await.unwrap();
        store
            .apply(&[
                env(
                    "a",
                    "ses_b",
                    3,
                    SyncEvent::MessageRemoved {
                        session_id: "ses_b".into(),
                        message_id: "msg_2".into(),
                    },
                ),
                env(
                    "a",
                    "ses_c",
                    3,
                    SyncEvent::SessionDeleted {
                        session_id: "ses_c".into(),
                    },
                ),
            ])
            .await
            .unwrap();
        check_all(&store, &texts, &sessions).await.unwrap();
    });
}

// ---------------------------------------------------------------------------------------
// The file: upgrade, on and off

mod raw {
    use redb::{ReadableDatabase, ReadableTableMetadata, TableDefinition, TableHandle};
    use std::path::Path;

    pub const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
    pub const TABLES: [&str; 6] = [
        "search_docs",
        "search_refs",
        "search_postings",
        "search_df",
        "search_stats",
        "search_sessions",
    ];

    /// `meta`'s `search_index`, and the rows of each index table (`None`: no table).
    pub fn index(path: &Path) -> (Option<u64>, Vec<Option<u64>>) {
        let db = redb::Database::create(path).unwrap();
        let txn = db.begin_read().unwrap();
        let kept = txn
            .open_table(META)
            .unwrap()
            .get("search_index")
            .unwrap()
            .map(|v| v.value());
        let names: Vec<String> = txn
            .list_tables()
            .unwrap()
            .map(|t| t.name().to_owned())
            .collect();
        let rows = TABLES
            .iter()
            .map(|name| {
                names.iter().any(|n| n == name).then(|| {
                    let def = TableDefinition::<&[u8], &[u8]>::new(name);
                    txn.open_untyped_table(def).unwrap().len().unwrap()
                })
            })
            .collect();
        (kept, rows)
    }

    /// Turns the file into what schema version 5 wrote: no index tables, no
    /// `search_index`.
    pub fn make_version_5(path: &Path) {
        let db = redb::Database::create(path).unwrap();
        let txn = db.begin_write().unwrap();
        for name in TABLES {
            assert!(txn
                .delete_table(TableDefinition::<&[u8], &[u8]>::new(name))
                .unwrap());
        }
        let mut meta = txn.open_table(META).unwrap();
        meta.remove("search_index").unwrap();
        meta.insert("schema_version", 5).unwrap();
        drop(meta);
        txn.commit().unwrap();
    }
}

/// A history of two tenants with searched and unsearched parts.
fn history() -> Vec<Vec<Envelope<SyncEvent>>> {
    let mut batches = sample_history();
    let steps = [
        Step::Put(
            0,
            0,
            0,
            0,
            json!({"type": "text", "text": "alpha needle the"}),
        ),
        Step::Put(
            0,
            1,
            1,
            1,
            json!({"type": "reasoning", "text": "Beta needle", "time": {"start": 1}}),
        ),
        Step::Put(1, 0, 0, 2, json!({"type": "text", "text": "alpha gamma"})),
        Step::Put(
            0,
            0,
            2,
            3,
            json!({"type": "future-kind", "payload": "alpha"}),
        ),
    ];
    for (i, s) in steps.iter().enumerate() {
        batches.push(envelopes(s, 100 + i as u64));
    }
    batches
}

async fn check_history(store: &RedbStore) {
    let mut texts: Vec<&str> = FIXTURE_WORDS.to_vec();
    texts.extend(["alpha", "needle", "beta", "gamma", "alpha needle"]);
    check_all(store, &texts, &S[..2]).await.unwrap();
    assert_eq!(
        store
            .search(&tenant("a"), &SearchQuery::new("needle"))
            .await
            .unwrap()
            .len(),
        2
    );
}

fn open(path: &std::path::Path, search: bool) -> RedbStore {
    RedbStore::open_with(
        path,
        RedbOptions {
            search,
            ..RedbOptions::default()
        },
    )
    .unwrap()
}

#[test]
fn a_version_5_file_is_upgraded_and_its_index_built() {
    let rt = runtime();
    let (dir, path) = temp_path();
    on_file(&rt, &path, async |store| apply_all(store, &history()).await);
    let (kept, rows) = raw::index(&path);
    assert_eq!(kept, Some(1));
    assert!(rows.iter().all(|r| r.is_some_and(|n| n > 0)), "{rows:?}");
    raw::make_version_5(&path);
    assert_eq!(raw::index(&path), (None, vec![None; 6]));

    let recorder = Recorder::default();
    let _logs = tracing::subscriber::set_default(recorder.clone());
    rt.block_on(async {
        let store = RedbStore::open(&path).unwrap();
        assert_eq!(store.capabilities().search, SearchKind::Index);
        check_history(&store).await;
        store.close().await.unwrap();
    });
    let log = recorder.take().events.join("\n");
    assert!(
        log.contains("built the search index") && log.contains("schema version 5"),
        "{log}"
    );
    assert_eq!(raw::index(&path), (Some(1), rows));
    assert!(dir.path().join("forge.redb.schema-v5.bak").exists());
}

#[test]
fn search_off_keeps_no_index_and_on_builds_it_again() {
    let rt = runtime();
    let (_dir, path) = temp_path();
    rt.block_on(async {
        let store = open(&path, false);
        assert_eq!(store.capabilities().search, SearchKind::Off);
        apply_all(&store, &history()).await;
        let err = store
            .search(&tenant("a"), &SearchQuery::new("needle"))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::Unsupported(m) if m.contains("search=off")),
            "{err:?}"
        );
        store.close().await.unwrap();
    });
    assert_eq!(raw::index(&path), (Some(0), vec![Some(0); 6]));

    let recorder = Recorder::default();
    let _logs = tracing::subscriber::set_default(recorder.clone());
    rt.block_on(async {
        let store = open(&path, true);
        assert_eq!(store.capabilities().search, SearchKind::Index);
        check_history(&store).await;
        // Written while on: kept up to date.
        store
            .apply(&envelopes(
                &Step::Put(0, 2, 0, 0, json!({"type": "text", "text": "needle three"})),
                200,
            ))
            .await
            .unwrap();
        check_all(&store, &["needle", "three"], S).await.unwrap();
        store.close().await.unwrap();
    });
    assert!(recorder
        .take()
        .events
        .iter()
        .any(|e| e.contains("built the search index")));
    let (kept, rows) = raw::index(&path);
    assert_eq!(kept, Some(1));
    assert!(rows.iter().all(|r| r.is_some_and(|n| n > 0)), "{rows:?}");

    // Off again: the index is dropped, not left to go stale.
    rt.block_on(async { open(&path, false).close().await.unwrap() });
    assert!(recorder
        .take()
        .events
        .iter()
        .any(|e| e.contains("dropped the search index")));
    assert_eq!(raw::index(&path), (Some(0), vec![Some(0); 6]));
    rt.block_on(async {
        let store = open(&path, true);
        check_all(&store, &["needle", "three", "alpha"], S)
            .await
            .unwrap();
        store.close().await.unwrap();
    });
    // Opening as it is writes nothing more.
    assert_eq!(raw::index(&path).0, Some(1));
}
